package dev.stoker.job;

import dev.stoker.connectors.fetch.S3ClientSettings;
import dev.stoker.connectors.fetch.S3ImageStore;
import dev.stoker.connectors.source.DatasetListing;
import dev.stoker.operators.tokenize.ChatTokenizer;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.regex.Pattern;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;

/**
 * What {@code main()} checks before it submits, so that a submission that cannot work fails in
 * {@code flink run} with a message naming the option and its value, instead of being accepted and
 * then failing on the TaskManagers.
 *
 * <ul>
 *   <li>Local paths: the TaskManagers run in other working directories than {@code flink run}, so a
 *       relative {@link StokerOptions#DATASET_PATH}, {@link StokerOptions#MIXTURE_PATH}, {@link
 *       StokerOptions#INDEX_CACHE}, {@link StokerOptions#TOKENIZER_PATH}, {@link
 *       StokerOptions#OUTPUT_ROOT} or {@link StokerOptions#DEAD_LETTER_PATH} is made absolute
 *       against the client's working directory (and the job's configuration shows the absolute
 *       path). The tokenizer and the output root are read and written with local file APIs on every
 *       TaskManager: a URI other than {@code file:} is rejected for them. ({@link
 *       StokerOptions#IMAGE_ROOT} is made absolute by {@link StokerConfig#imageRoot}.)
 *   <li>The tokenizer loads ({@link ChatTokenizer#open}) and every source of the mixture lists
 *       ({@link DatasetListing#scan}, in {@link MixturePlan#of}).
 *   <li>S3: when images are read from S3 (each source's image root, or its dataset root without
 *       one), one listing per root with the job's {@code stoker.s3.*} settings must succeed.
 * </ul>
 *
 * <p>The same path must exist on every TaskManager; a tokenizer present for the client but missing
 * on a TaskManager fails that task for good ({@code TokenizeFunction}), without restarts.
 */
final class StartupChecks {
    private static final Pattern URI_SCHEME = Pattern.compile("^[A-Za-z][A-Za-z0-9+.-]*:");

    private StartupChecks() {}

    /**
     * Makes the local path options absolute in {@code conf} (see class comment).
     *
     * @throws IllegalConfigurationException naming the option and value, for a path that is not
     *     valid or a URI where only a local path works
     */
    static void absolutizePaths(Configuration conf) {
        for (ConfigOption<String> option :
                List.of(
                        StokerOptions.DATASET_PATH,
                        StokerOptions.MIXTURE_PATH,
                        StokerOptions.INDEX_CACHE,
                        StokerOptions.DEAD_LETTER_PATH)) {
            conf.getOptional(option)
                    .filter(v -> !URI_SCHEME.matcher(v).find())
                    .ifPresent(v -> conf.set(option, absolute(option, v)));
        }
        for (ConfigOption<String> option :
                List.of(StokerOptions.TOKENIZER_PATH, StokerOptions.OUTPUT_ROOT)) {
            conf.getOptional(option).ifPresent(v -> conf.set(option, localPath(option, v)));
        }
    }

    /**
     * The tokenizer's directory as {@link #absolutizePaths} will make it, or null when {@link
     * StokerOptions#TOKENIZER_PATH} is not set or not a usable local path (the checks then say
     * why).
     */
    static Path tokenizerDirectory(Configuration conf) {
        return conf.getOptional(StokerOptions.TOKENIZER_PATH)
                .map(
                        value -> {
                            try {
                                return Path.of(localPath(StokerOptions.TOKENIZER_PATH, value));
                            } catch (IllegalConfigurationException | InvalidPathException e) {
                                return null;
                            }
                        })
                .orElse(null);
    }

    /**
     * Starts loading the tokenizer on a thread of its own ({@link ChatTokenizer#loadShared}), so
     * that its ~1 s (Qwen's 11 MB tokenizer.json streamed into a copy, which DJL then loads)
     * overlaps the listing of the mixture's sources; {@link #tokenizerPadId} waits for it. The new
     * thread inherits this thread's context class loader, which under {@code flink run} is the one
     * that holds the job jar (DJL finds its native library through it). The check's handle is
     * released once the padding id is read: the tokenizer stays loaded only while something else in
     * this JVM holds it (the embedded job, {@link StokerJob#main}).
     *
     * @return the loading, which yields the padding token id
     */
    static CompletableFuture<Long> loadTokenizer(Configuration conf) {
        String dir = conf.get(StokerOptions.TOKENIZER_PATH);
        return ChatTokenizer.loadShared(Path.of(dir))
                .handle(
                        (tokenizer, failure) -> {
                            if (failure == null) {
                                try (tokenizer) {
                                    return tokenizer.padTokenId();
                                }
                            }
                            // the load's own exception: loadShared's future is not a derived one
                            if (failure instanceof IOException
                                    || failure instanceof RuntimeException) {
                                throw bad(
                                        StokerOptions.TOKENIZER_PATH,
                                        dir,
                                        "does not load as a tokenizer: " + failure);
                            }
                            // e.g. DJL's native library not loadable: thrown by tokenizerPadId
                            throw new CompletionException(failure);
                        });
    }

    /**
     * Waits for {@link #loadTokenizer}.
     *
     * @return the tokenizer's padding token id
     * @throws IllegalConfigurationException naming {@link StokerOptions#TOKENIZER_PATH}, its value
     *     and why it does not load
     */
    static long tokenizerPadId(CompletableFuture<Long> loading) {
        try {
            return loading.join();
        } catch (CompletionException e) {
            if (e.getCause() instanceof RuntimeException cause) {
                throw cause;
            }
            if (e.getCause() instanceof Error cause) {
                throw cause;
            }
            throw e;
        }
    }

    /**
     * When images come from S3, lists each source's image root once with the job's S3 settings
     * ({@link JobPlan#s3Settings}), all through one client.
     *
     * @throws IllegalConfigurationException naming the option (and source) the image root comes
     *     from, its value and the S3 error
     */
    static void checkS3(Configuration conf, MixturePlan mixture, S3ClientSettings settings) {
        java.util.Set<String> roots = new java.util.LinkedHashSet<>();
        for (int s = 0; s < mixture.order.numSources(); s++) {
            if (S3ImageStore.isS3(mixture.rootOf(s))) {
                roots.add(mixture.rootOf(s));
            }
        }
        java.util.Map<String, String> failed = S3ImageStore.unreachableRoots(roots, settings);
        for (int s = 0; s < mixture.order.numSources(); s++) {
            String why = failed.get(mixture.rootOf(s));
            if (why != null) {
                throw new IllegalConfigurationException(
                        whereRootComesFrom(conf, mixture.spec, mixture.spec.sources.get(s))
                                + " is not reachable with the stoker.s3.* settings: "
                                + why);
            }
        }
    }

    /** The option (and source and field) an image root comes from, and its value. */
    private static String whereRootComesFrom(
            Configuration conf, MixtureSpec spec, MixtureSpec.Source source) {
        if (source.imageRoot != null) {
            return spec.where(source, "image_root", source.imageRoot);
        }
        if (conf.contains(StokerOptions.IMAGE_ROOT)) {
            return "--"
                    + StokerOptions.IMAGE_ROOT.key()
                    + " '"
                    + conf.get(StokerOptions.IMAGE_ROOT)
                    + "'";
        }
        return spec.where(source, "path", source.path);
    }

    private static String localPath(ConfigOption<String> option, String value) {
        if (!URI_SCHEME.matcher(value).find()) {
            return absolute(option, value);
        }
        URI uri;
        try {
            uri = new URI(value);
        } catch (URISyntaxException e) {
            throw bad(option, value, "is not a valid path or file: URI: " + e.getMessage());
        }
        if (!"file".equalsIgnoreCase(uri.getScheme()) || uri.getPath() == null) {
            throw bad(
                    option,
                    value,
                    "must be a local directory (the same path on every TaskManager), not a "
                            + uri.getScheme()
                            + ": URI");
        }
        return absolute(option, uri.getPath());
    }

    private static String absolute(ConfigOption<String> option, String value) {
        if (value.isBlank()) {
            throw bad(option, value, "is empty");
        }
        try {
            return Path.of(value).toAbsolutePath().normalize().toString();
        } catch (InvalidPathException e) {
            throw bad(option, value, "is not a valid path: " + e.getMessage());
        }
    }

    private static IllegalConfigurationException bad(
            ConfigOption<String> option, String value, String why) {
        return new IllegalConfigurationException("--" + option.key() + " '" + value + "' " + why);
    }
}

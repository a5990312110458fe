package dev.stoker.job;

import dev.stoker.connectors.fetch.S3ImageStore;
import dev.stoker.connectors.source.DatasetListing;
import dev.stoker.operators.tokenize.ChatTokenizer;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.util.List;
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
 *       relative {@link StokerOptions#DATASET_PATH}, {@link StokerOptions#TOKENIZER_PATH}, {@link
 *       StokerOptions#OUTPUT_ROOT} or {@link StokerOptions#DEAD_LETTER_PATH} is made absolute
 *       against the client's working directory (and the job's configuration shows the absolute
 *       path). The tokenizer and the output root are read and written with local file APIs on every
 *       TaskManager: a URI other than {@code file:} is rejected for them. ({@link
 *       StokerOptions#IMAGE_ROOT} is made absolute by {@link StokerConfig#imageRoot}.)
 *   <li>The tokenizer loads ({@link ChatTokenizer#open}) and the dataset lists ({@link
 *       DatasetListing#scan}).
 *   <li>S3: when images are read from S3 (the image root, or the dataset root without one), one
 *       listing with the job's {@code stoker.s3.*} settings must succeed.
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
                List.of(StokerOptions.DATASET_PATH, StokerOptions.DEAD_LETTER_PATH)) {
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
     * Loads the tokenizer.
     *
     * @return its padding token id
     * @throws IllegalConfigurationException naming {@link StokerOptions#TOKENIZER_PATH}, its value
     *     and why it does not load
     */
    static long tokenizerPadId(Configuration conf) {
        String dir = conf.get(StokerOptions.TOKENIZER_PATH);
        try (ChatTokenizer tokenizer = ChatTokenizer.open(Path.of(dir))) {
            return tokenizer.padTokenId();
        } catch (IOException | RuntimeException e) {
            throw bad(StokerOptions.TOKENIZER_PATH, dir, "does not load as a tokenizer: " + e);
        }
    }

    /**
     * Lists the dataset.
     *
     * @throws IllegalConfigurationException naming {@link StokerOptions#DATASET_PATH}, its value
     *     and why it does not list
     */
    static DatasetListing listDataset(Configuration conf) {
        String root = conf.get(StokerOptions.DATASET_PATH);
        try {
            return DatasetListing.scan(
                    new org.apache.flink.core.fs.Path(root),
                    conf.get(StokerOptions.DATASET_GLOB),
                    (int) conf.get(StokerOptions.MAX_LINE_LENGTH).getBytes());
        } catch (IOException | RuntimeException e) {
            throw bad(StokerOptions.DATASET_PATH, root, "cannot be listed: " + e);
        }
    }

    /**
     * When images come from S3, lists their root once with the job's S3 settings.
     *
     * @param imageRoot the effective image root ({@link StokerConfig#imageRoot})
     * @throws IllegalConfigurationException naming the option the image root comes from, its value
     *     and the S3 error
     */
    static void checkS3(Configuration conf, String imageRoot) {
        if (!S3ImageStore.isS3(imageRoot)) {
            return;
        }
        try {
            S3ImageStore.checkReachable(imageRoot, StokerPipeline.s3Settings(conf));
        } catch (IOException | RuntimeException e) {
            ConfigOption<String> option =
                    conf.contains(StokerOptions.IMAGE_ROOT)
                            ? StokerOptions.IMAGE_ROOT
                            : StokerOptions.DATASET_PATH;
            throw bad(
                    option,
                    conf.get(option),
                    "is not reachable with the stoker.s3.* settings: " + e.getMessage());
        }
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

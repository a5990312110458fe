package dev.stoker.job;

import dev.stoker.connectors.fetch.S3ImageStore;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.InvalidPathException;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;
import org.apache.flink.util.ParameterTool;

/** Reads the job configuration from program arguments and checks it. */
final class StokerConfig {
    private static final List<ConfigOption<?>> OPTIONS = declaredOptions();

    /** The largest Java byte array, in bytes. */
    private static final long MAX_ARRAY_BYTES = Integer.MAX_VALUE - 8;

    private static final Pattern URI_SCHEME = Pattern.compile("^[A-Za-z][A-Za-z0-9+.-]*:");

    private StokerConfig() {}

    /**
     * {@code --key value} arguments (parsed by Flink's {@link ParameterTool}) as a Configuration.
     */
    static Configuration fromArgs(String[] args) {
        return Configuration.fromMap(ParameterTool.fromArgs(args).toMap());
    }

    /**
     * @throws IllegalConfigurationException naming the option, for a missing required option, an
     *     unknown {@code stoker.*} key (typos) or a value out of range
     */
    static void validate(Configuration conf) {
        Set<String> known =
                OPTIONS.stream()
                        .map(ConfigOption::key)
                        .collect(Collectors.toCollection(TreeSet::new));
        List<String> unknown =
                conf.keySet().stream()
                        .filter(k -> k.startsWith("stoker.") && !known.contains(k))
                        .sorted()
                        .toList();
        if (!unknown.isEmpty()) {
            throw new IllegalConfigurationException(
                    "Unknown Stoker option(s): " + unknown + "; known: " + known);
        }
        if (conf.contains(StokerOptions.MIXTURE_PATH)
                == conf.contains(StokerOptions.DATASET_PATH)) {
            throw new IllegalConfigurationException(
                    "Set exactly one of --"
                            + StokerOptions.MIXTURE_PATH.key()
                            + " (a mixture of datasets) and --"
                            + StokerOptions.DATASET_PATH.key()
                            + " (one dataset)");
        }
        require(conf, StokerOptions.TOKENIZER_PATH);
        positive(conf, StokerOptions.DP_WORLD_SIZE);
        positive(conf, StokerOptions.MICRO_BATCH_SIZE);
        positive(conf, StokerOptions.EPOCHS);
        if (conf.get(StokerOptions.PREFETCH_DEPTH) < 0) {
            throw new IllegalConfigurationException(
                    StokerOptions.PREFETCH_DEPTH.key()
                            + " must be >= 0 (0 = unbounded), got "
                            + conf.get(StokerOptions.PREFETCH_DEPTH));
        }
        if (conf.getOptional(StokerOptions.RESUME_STEP).orElse(-1L) < -1) {
            throw new IllegalConfigurationException(
                    StokerOptions.RESUME_STEP.key()
                            + " must be >= -1, got "
                            + conf.get(StokerOptions.RESUME_STEP));
        }
        if (conf.get(StokerOptions.MIXTURE_START_STEP) < 0) {
            throw new IllegalConfigurationException(
                    StokerOptions.MIXTURE_START_STEP.key()
                            + " must be >= 0, got "
                            + conf.get(StokerOptions.MIXTURE_START_STEP));
        }
        if (conf.get(StokerOptions.MIXTURE_START_POSITION) < 0) {
            throw new IllegalConfigurationException(
                    StokerOptions.MIXTURE_START_POSITION.key()
                            + " must be >= 0, got "
                            + conf.get(StokerOptions.MIXTURE_START_POSITION));
        }
        positive(conf, StokerOptions.LISTING_THREADS);
        positive(conf, StokerOptions.FETCH_CAPACITY);
        positive(conf, StokerOptions.FETCH_THREADS);
        positive(conf, StokerOptions.S3_MAX_ATTEMPTS);
        positive(conf, StokerOptions.S3_MAX_CONNECTIONS);
        if (conf.contains(StokerOptions.S3_REQUEST_TIMEOUT)
                && conf.get(StokerOptions.S3_REQUEST_TIMEOUT)
                                .compareTo(conf.get(StokerOptions.FETCH_TIMEOUT))
                        >= 0) {
            throw new IllegalConfigurationException(
                    StokerOptions.S3_REQUEST_TIMEOUT.key()
                            + " ("
                            + conf.get(StokerOptions.S3_REQUEST_TIMEOUT)
                            + ") must be below "
                            + StokerOptions.FETCH_TIMEOUT.key()
                            + " ("
                            + conf.get(StokerOptions.FETCH_TIMEOUT)
                            + ")");
        }
        long videoBytes = conf.get(StokerOptions.VIDEO_MAX_BYTES).getBytes();
        if (videoBytes < 1 || videoBytes > MAX_ARRAY_BYTES) {
            throw new IllegalConfigurationException(
                    StokerOptions.VIDEO_MAX_BYTES.key()
                            + " must be between 1 byte and "
                            + MAX_ARRAY_BYTES
                            + " bytes (a video is read into one Java array), got "
                            + conf.get(StokerOptions.VIDEO_MAX_BYTES));
        }
        conf.getOptional(StokerOptions.VIDEO_SPILL_DIR).ifPresent(StokerConfig::spillDirectory);
        conf.getOptional(StokerOptions.IMAGE_ROOT).ifPresent(StokerConfig::imageRootUri);
        if (!conf.get(StokerOptions.JOB_NAME).matches("[A-Za-z0-9._-]+")) {
            throw new IllegalConfigurationException(
                    StokerOptions.JOB_NAME.key()
                            + " must match [A-Za-z0-9._-]+ (it names a directory): "
                            + conf.get(StokerOptions.JOB_NAME));
        }
        Topology.of(conf);
    }

    /**
     * {@link StokerOptions#VIDEO_SPILL_DIR}'s value, normalised; it must be an absolute local path
     * (the TaskManagers' own filesystem: it is not checked here, where the client runs).
     *
     * @throws IllegalConfigurationException naming the option when it is not one
     */
    static String spillDirectory(String value) {
        java.nio.file.Path path;
        try {
            path = java.nio.file.Path.of(value);
        } catch (InvalidPathException e) {
            path = null;
        }
        if (value.isBlank() || path == null || !path.isAbsolute()) {
            throw new IllegalConfigurationException(
                    StokerOptions.VIDEO_SPILL_DIR.key()
                            + " '"
                            + value
                            + "' must be an absolute local path (a directory on each TaskManager),"
                            + " e.g. /mnt/local-ssd/stoker-spill");
        }
        return path.normalize().toString();
    }

    /**
     * Tokens per packed row: {@link StokerOptions#PACKING_MAX_TOKENS}, or {@code maxSeqLen}, the
     * longest maximum sequence length of any source.
     *
     * @throws IllegalConfigurationException if it is below {@code maxSeqLen}
     */
    static int packingMaxTokens(Configuration conf, int maxSeqLen) {
        int maxTokens = conf.getOptional(StokerOptions.PACKING_MAX_TOKENS).orElse(maxSeqLen);
        if (maxTokens < maxSeqLen) {
            throw new IllegalConfigurationException(
                    StokerOptions.PACKING_MAX_TOKENS.key()
                            + " ("
                            + maxTokens
                            + ") must be at least the longest maximum sequence length ("
                            + maxSeqLen
                            + ": "
                            + StokerOptions.MAX_SEQ_LEN.key()
                            + " or a mixture source's max_seq_len), so every sample fits a packed"
                            + " row; lower it or raise the row size");
        }
        return maxTokens;
    }

    /** Every {@link StokerOptions} option. */
    static List<ConfigOption<?>> options() {
        return OPTIONS;
    }

    /** {@code <output-root>/<job-name>}. */
    static String jobDir(Configuration conf) {
        return conf.get(StokerOptions.OUTPUT_ROOT) + "/" + conf.get(StokerOptions.JOB_NAME);
    }

    /** The configured dead-letter directory, or {@code <job-dir>/dead-letters}. */
    static String deadLetterDir(Configuration conf) {
        return conf.getOptional(StokerOptions.DEAD_LETTER_PATH)
                .orElse(jobDir(conf) + "/dead-letters");
    }

    /**
     * The root image paths resolve against: {@link StokerOptions#IMAGE_ROOT} (a local path made an
     * absolute {@code file:} URI, so every TaskManager resolves it the same way) or, unset, {@code
     * datasetRoot} as listed.
     */
    static String imageRoot(Configuration conf, String datasetRoot) {
        return conf.getOptional(StokerOptions.IMAGE_ROOT)
                .map(StokerConfig::imageRootUri)
                .orElse(datasetRoot);
    }

    /**
     * Checks at start-up that a configured {@link StokerOptions#IMAGE_ROOT} outside S3 is a
     * directory its filesystem can read (S3 prefixes are not objects; a wrong bucket shows in the
     * first fetches' dead letters). Does nothing when the option is unset.
     *
     * @throws IllegalConfigurationException naming the option and its value
     */
    static void checkImageRoot(Configuration conf) {
        Optional<String> value = conf.getOptional(StokerOptions.IMAGE_ROOT);
        if (value.isPresent()) {
            checkImageRootDirectory(imageRootUri(value.get()), value.get());
        }
    }

    /**
     * Checks that the image root {@code uri} (as {@link #imageRootUri} made it from {@code value})
     * is a directory its filesystem can read; does nothing for S3 (prefixes are not objects).
     *
     * @throws IllegalConfigurationException naming the value
     */
    static void checkImageRootDirectory(String uri, String value) {
        if (S3ImageStore.isS3(uri)) {
            return;
        }
        Path root = new Path(URI.create(uri));
        try {
            FileSystem fs = root.getFileSystem();
            if (!fs.exists(root) || !fs.getFileStatus(root).isDir()) {
                throw badImageRoot(value, "is not an existing directory");
            }
        } catch (IOException e) {
            throw badImageRoot(value, "cannot be read: " + e.getMessage());
        }
    }

    /**
     * An image root as an absolute URI: a local path made an absolute {@code file:} URI.
     *
     * @throws IllegalConfigurationException naming the value when it is empty, not a valid URI or
     *     path, opaque, with a query or fragment, or an S3 URI without a bucket
     */
    static String imageRootUri(String value) {
        if (value.isBlank()) {
            throw badImageRoot(value, "is empty");
        }
        URI uri;
        try {
            uri =
                    URI_SCHEME.matcher(value).find()
                            ? new URI(value)
                            : java.nio.file.Path.of(value).toAbsolutePath().normalize().toUri();
        } catch (URISyntaxException | InvalidPathException e) {
            throw badImageRoot(value, "is not a valid URI or path: " + e.getMessage());
        }
        if (uri.isOpaque()) {
            throw badImageRoot(value, "is not a directory URI (scheme://authority/path) or path");
        }
        if (uri.getQuery() != null || uri.getFragment() != null) {
            throw badImageRoot(value, "has a query or fragment; give a directory");
        }
        if (S3ImageStore.isS3(value) && (uri.getAuthority() == null || uri.getPath() == null)) {
            throw badImageRoot(value, "must name a bucket: s3://bucket/prefix");
        }
        return uri.toString();
    }

    private static IllegalConfigurationException badImageRoot(String value, String why) {
        return new IllegalConfigurationException(
                StokerOptions.IMAGE_ROOT.key() + " '" + value + "' " + why);
    }

    private static void require(Configuration conf, ConfigOption<String> option) {
        if (!conf.contains(option)) {
            throw new IllegalConfigurationException("Missing required option --" + option.key());
        }
    }

    private static void positive(Configuration conf, ConfigOption<Integer> option) {
        if (conf.get(option) < 1) {
            throw new IllegalConfigurationException(
                    option.key() + " must be >= 1, got " + conf.get(option));
        }
    }

    private static List<ConfigOption<?>> declaredOptions() {
        List<ConfigOption<?>> options = new ArrayList<>();
        for (java.lang.reflect.Field f : StokerOptions.class.getFields()) {
            if (ConfigOption.class.isAssignableFrom(f.getType())) {
                try {
                    options.add((ConfigOption<?>) f.get(null));
                } catch (IllegalAccessException e) {
                    throw new IllegalStateException(e);
                }
            }
        }
        return options;
    }
}

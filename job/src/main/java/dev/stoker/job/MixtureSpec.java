package dev.stoker.job;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;
import dev.stoker.operators.batch.MixtureOrder;
import dev.stoker.operators.json.Json;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.parse.RecordFormat;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.regex.Pattern;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.core.fs.Path;

/**
 * The mixture spec: which datasets (sources) a run blends, how many records each contributes per
 * epoch, and each source's own settings. Read from the YAML file named by {@link
 * StokerOptions#MIXTURE_PATH}; {@link StokerOptions#DATASET_PATH} alone is the one-source mixture
 * named {@value RecordRef#SINGLE_SOURCE}.
 *
 * <pre>{@code
 * samples_per_epoch: 100000        # only with weights; default: all sources' records together
 * sources:
 *   - name: llava-instruct         # [A-Za-z0-9._-]+, unique; in metrics, dead letters, manifest
 *     path: s3://bucket/llava/     # dataset root (relative: against this file's directory)
 *     glob: "*.jsonl"              # default stoker.dataset.glob
 *     weight: 3                    # share of samples_per_epoch (all sources weighted, or none)
 *   - name: ocr
 *     path: ocr/
 *     repeat: 2.5                  # records per epoch = round(2.5 x its records): up-sampled
 *     image_root: s3://bucket/ocr-images/
 *     max_pixels: 1003520
 *   - name: web
 *     path: web/
 *     count: 50000                 # exactly 50000 per epoch: down-sampled, a new slice each epoch
 *     system_prompt: "You are a helpful assistant."
 *     max_seq_len: 4096
 *     format: sharegpt             # read every record as this layout; default auto: per record
 * }</pre>
 *
 * <p>Each source gives at most one of {@code weight}, {@code repeat} and {@code count} (none:
 * {@code repeat: 1}). Weighted sources split {@code samples_per_epoch} exactly by largest remainder
 * ({@link MixtureOrder#countsFromWeights}). Overrides: {@code image_root} (else {@code
 * stoker.image.root}, else the source's path), {@code system_prompt} (else {@code
 * stoker.template.default-system-prompt}; empty: none), {@code min_pixels}, {@code max_pixels} and
 * {@code max_seq_len} (else the {@code stoker.image.*} and {@code stoker.max-seq-len} values).
 * {@code format}: one of {@link RecordFormat}'s keys.
 */
final class MixtureSpec {
    private static final ObjectMapper YAML =
            Json.mapper(YAMLFactory.builder().recyclerPool(Json.pool()).build());
    private static final ObjectMapper JSON = Json.mapper();
    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9._-]+");
    private static final Pattern URI_SCHEME = Pattern.compile("^[A-Za-z][A-Za-z0-9+.-]*:");
    private static final Set<String> TOP_KEYS = Set.of("samples_per_epoch", "sources");
    private static final Set<String> SOURCE_KEYS =
            Set.of(
                    "name",
                    "path",
                    "glob",
                    "weight",
                    "repeat",
                    "count",
                    "image_root",
                    "system_prompt",
                    "min_pixels",
                    "max_pixels",
                    "max_seq_len",
                    "format");

    /** One source as the spec gives it; {@code null} where the spec leaves a field out. */
    static final class Source {
        final String name;
        final String path;
        final String glob;
        final Double weight;
        final Double repeat;
        final Long count;
        final String imageRoot;
        final String systemPrompt;
        final Long minPixels;
        final Long maxPixels;
        final Integer maxSeqLen;

        /** The record layout its records are read as ({@code auto} when the spec gives none). */
        final RecordFormat format;

        Source(
                String name,
                String path,
                String glob,
                Double weight,
                Double repeat,
                Long count,
                String imageRoot,
                String systemPrompt,
                Long minPixels,
                Long maxPixels,
                Integer maxSeqLen,
                RecordFormat format) {
            this.name = name;
            this.path = path;
            this.glob = glob;
            this.weight = weight;
            this.repeat = repeat;
            this.count = count;
            this.imageRoot = imageRoot;
            this.systemPrompt = systemPrompt;
            this.minPixels = minPixels;
            this.maxPixels = maxPixels;
            this.maxSeqLen = maxSeqLen;
            this.format = format;
        }

        /** A source with only a name, path and glob (the one-source mixture). */
        Source(String name, String path, String glob) {
            this(
                    name,
                    path,
                    glob,
                    null,
                    null,
                    null,
                    null,
                    null,
                    null,
                    null,
                    null,
                    RecordFormat.AUTO);
        }

        static Source read(Fields f) throws SpecException {
            String name = f.string("name", true);
            if (!NAME.matcher(name).matches()) {
                throw f.bad(
                        "name",
                        "must match [A-Za-z0-9._-]+ (it names metrics), got '" + name + "'");
            }
            String path = f.string("path", true);
            String glob = f.string("glob", false);
            Double weight = f.positiveNumber("weight");
            Double repeat = f.positiveNumber("repeat");
            Long count = f.positiveLong("count");
            if ((weight != null ? 1 : 0) + (repeat != null ? 1 : 0) + (count != null ? 1 : 0) > 1) {
                throw f.bad("weight/repeat/count", "give at most one of them");
            }
            Long minPixels = f.positiveLong("min_pixels");
            Long maxPixels = f.positiveLong("max_pixels");
            Long seqLen = f.positiveLong("max_seq_len");
            if (seqLen != null && seqLen > Integer.MAX_VALUE) {
                throw f.bad("max_seq_len", "is too large: " + seqLen);
            }
            String format = f.string("format", false);
            RecordFormat recordFormat;
            try {
                recordFormat = format == null ? RecordFormat.AUTO : RecordFormat.fromKey(format);
            } catch (IllegalArgumentException e) {
                throw f.bad("format", e.getMessage());
            }
            return new Source(
                    name,
                    path,
                    glob,
                    weight,
                    repeat,
                    count,
                    f.string("image_root", false),
                    f.string("system_prompt", false),
                    minPixels,
                    maxPixels,
                    seqLen == null ? null : seqLen.intValue(),
                    recordFormat);
        }
    }

    /** Where the spec came from: the option's value, or {@code stoker.dataset.path}. */
    final String location;

    final Long samplesPerEpoch;
    final List<Source> sources;

    /** Whether this is the one-source mixture of {@code stoker.dataset.path} (no spec file). */
    final boolean fromDatasetPath;

    private MixtureSpec(
            String location, Long samplesPerEpoch, List<Source> sources, boolean fromDatasetPath) {
        this.location = location;
        this.fromDatasetPath = fromDatasetPath;
        this.samplesPerEpoch = samplesPerEpoch;
        this.sources = List.copyOf(sources);
    }

    /**
     * The run's mixture: the spec at {@link StokerOptions#MIXTURE_PATH}, or the one-source mixture
     * of {@link StokerOptions#DATASET_PATH}.
     *
     * @throws IllegalConfigurationException naming the option, and the source and field, when the
     *     spec cannot be read or is not valid
     */
    static MixtureSpec of(Configuration conf) {
        String glob = conf.get(StokerOptions.DATASET_GLOB);
        if (!conf.contains(StokerOptions.MIXTURE_PATH)) {
            String path = conf.get(StokerOptions.DATASET_PATH);
            return new MixtureSpec(
                    path, null, List.of(new Source(RecordRef.SINGLE_SOURCE, path, glob)), true);
        }
        String location = conf.get(StokerOptions.MIXTURE_PATH);
        byte[] yaml;
        try {
            Path path = new Path(location);
            try (InputStream in = path.getFileSystem().open(path)) {
                yaml = in.readAllBytes();
            }
        } catch (IOException | RuntimeException e) {
            throw bad(location, "cannot be read: " + e);
        }
        return parse(location, yaml, glob);
    }

    /**
     * Parses and checks a spec. Relative source paths and image roots resolve against the spec's
     * directory.
     *
     * @param location the spec's path or URI (named in errors, base of relative paths)
     * @param defaultGlob the glob of a source that gives none
     * @throws IllegalConfigurationException naming {@code location}, the source and the field
     */
    static MixtureSpec parse(String location, byte[] yaml, String defaultGlob) {
        JsonNode root;
        try {
            root = YAML.readTree(yaml);
        } catch (IOException e) {
            throw bad(location, "is not valid YAML: " + e.getMessage());
        }
        try {
            if (root == null || !root.isObject()) {
                throw new SpecException("must be a mapping with a 'sources' list");
            }
            unknownKeys(root, TOP_KEYS, "");
            JsonNode list = root.get("sources");
            if (list == null || !list.isArray() || list.isEmpty()) {
                throw new SpecException("'sources' must be a non-empty list");
            }
            List<Source> sources = new ArrayList<>();
            Set<String> names = new HashSet<>();
            for (int i = 0; i < list.size(); i++) {
                JsonNode node = list.get(i);
                String where = "sources[" + i + "]";
                if (!node.isObject()) {
                    throw new SpecException(where + " must be a mapping");
                }
                unknownKeys(node, SOURCE_KEYS, where + " ");
                Source source = Source.read(new Fields(node, where));
                if (!names.add(source.name)) {
                    throw new SpecException(
                            where + " (source '" + source.name + "'): duplicate name");
                }
                sources.add(resolve(location, source, defaultGlob));
            }
            long weighted = sources.stream().filter(s -> s.weight != null).count();
            if (weighted != 0 && weighted != sources.size()) {
                Source other = sources.stream().filter(s -> s.weight == null).findFirst().get();
                throw new SpecException(
                        "source '"
                                + other.name
                                + "' has no weight while others do: weight every source (shares"
                                + " of samples_per_epoch) or none (repeat/count)");
            }
            Long samplesPerEpoch = null;
            if (root.has("samples_per_epoch")) {
                JsonNode n = root.get("samples_per_epoch");
                if (!n.canConvertToExactIntegral() || n.asLong() < 1) {
                    throw new SpecException("samples_per_epoch must be an integer >= 1, got " + n);
                }
                if (weighted == 0) {
                    throw new SpecException(
                            "samples_per_epoch is only for weighted sources (repeat and count fix"
                                    + " their own)");
                }
                samplesPerEpoch = n.asLong();
            }
            return new MixtureSpec(location, samplesPerEpoch, sources, false);
        } catch (SpecException e) {
            throw bad(location, e.getMessage());
        }
    }

    /**
     * Records each source contributes per epoch.
     *
     * @param records each source's record count (its listing), in spec order, each {@code >= 1}
     * @throws IllegalConfigurationException naming the source whose repeat rounds to no record
     */
    long[] countsPerEpoch(long[] records) {
        int n = sources.size();
        if (sources.get(0).weight != null) {
            double[] weights = new double[n];
            long total = 0;
            for (int s = 0; s < n; s++) {
                weights[s] = sources.get(s).weight;
                total += records[s];
            }
            long[] counts =
                    MixtureOrder.countsFromWeights(
                            samplesPerEpoch == null ? total : samplesPerEpoch, weights);
            for (int s = 0; s < n; s++) {
                if (counts[s] < 1) {
                    throw bad(
                            location,
                            "source '"
                                    + sources.get(s).name
                                    + "': its weight gives no record of samples_per_epoch; raise"
                                    + " one of them");
                }
            }
            return counts;
        }
        long[] counts = new long[n];
        for (int s = 0; s < n; s++) {
            Source source = sources.get(s);
            counts[s] =
                    source.count != null
                            ? source.count
                            : Math.round(
                                    (source.repeat == null ? 1.0 : source.repeat) * records[s]);
            if (counts[s] < 1) {
                throw bad(
                        location,
                        "source '"
                                + source.name
                                + "': repeat "
                                + source.repeat
                                + " of its "
                                + records[s]
                                + " records is no record per epoch");
            }
        }
        return counts;
    }

    /**
     * Where a value of {@code source} comes from, for messages: {@code --stoker.dataset.path
     * '<path>'} for the path of the one-source mixture, else {@code --stoker.mixture.path '<spec>':
     * source '<name>' <field> '<value>'}.
     */
    String where(Source source, String field, Object value) {
        if (fromDatasetPath && field.equals("path")) {
            return "--" + StokerOptions.DATASET_PATH.key() + " '" + value + "'";
        }
        return "--"
                + StokerOptions.MIXTURE_PATH.key()
                + " '"
                + location
                + "': source '"
                + source.name
                + "' "
                + field
                + " '"
                + value
                + "'";
    }

    /** The spec as canonical JSON (resolved paths, all fields), for the plan's fingerprint. */
    String canonicalJson() {
        ObjectNode root = JSON.createObjectNode();
        root.put("samples_per_epoch", samplesPerEpoch);
        ArrayNode list = root.putArray("sources");
        for (Source s : sources) {
            ObjectNode node = list.addObject();
            node.put("name", s.name);
            node.put("path", s.path);
            node.put("glob", s.glob);
            node.put("weight", s.weight);
            node.put("repeat", s.repeat);
            node.put("count", s.count);
            node.put("image_root", s.imageRoot);
            node.put("system_prompt", s.systemPrompt);
            node.put("min_pixels", s.minPixels);
            node.put("max_pixels", s.maxPixels);
            node.put("max_seq_len", s.maxSeqLen);
            node.put("format", s.format.key());
        }
        try {
            return JSON.writeValueAsString(root);
        } catch (IOException e) {
            throw new IllegalStateException("a tree of strings and numbers always writes", e);
        }
    }

    private static Source resolve(String location, Source s, String defaultGlob)
            throws SpecException {
        return new Source(
                s.name,
                against(location, s.path, s.name, "path"),
                s.glob == null ? defaultGlob : s.glob,
                s.weight,
                s.repeat,
                s.count,
                s.imageRoot == null ? null : against(location, s.imageRoot, s.name, "image_root"),
                s.systemPrompt,
                s.minPixels,
                s.maxPixels,
                s.maxSeqLen,
                s.format);
    }

    private static String against(String location, String value, String source, String field)
            throws SpecException {
        if (URI_SCHEME.matcher(value).find() || value.startsWith("/")) {
            return value;
        }
        try {
            if (URI_SCHEME.matcher(location).find()) {
                return URI.create(location).resolve(value).toString();
            }
            java.nio.file.Path dir =
                    java.nio.file.Path.of(location).toAbsolutePath().normalize().getParent();
            return dir.resolve(value).normalize().toString();
        } catch (IllegalArgumentException e) { // also InvalidPathException
            throw new SpecException(
                    "source '"
                            + source
                            + "' "
                            + field
                            + " '"
                            + value
                            + "' is not a valid path: "
                            + e.getMessage());
        }
    }

    private static void unknownKeys(JsonNode node, Set<String> known, String where)
            throws SpecException {
        for (Iterator<String> it = node.fieldNames(); it.hasNext(); ) {
            String key = it.next();
            if (!known.contains(key)) {
                String name =
                        node.path("name").isTextual()
                                ? " (source '" + node.get("name").asText() + "')"
                                : "";
                throw new SpecException(
                        where.trim()
                                + name
                                + (where.isEmpty() ? "" : ": ")
                                + "unknown key '"
                                + key
                                + "'; known: "
                                + new java.util.TreeSet<>(known));
            }
        }
    }

    private static IllegalConfigurationException bad(String location, String why) {
        return new IllegalConfigurationException(
                "--" + StokerOptions.MIXTURE_PATH.key() + " '" + location + "': " + why);
    }

    /** A spec error, before the location is put in front of it. */
    private static final class SpecException extends Exception {
        private static final long serialVersionUID = 1L;

        SpecException(String message) {
            super(message);
        }
    }

    /** Typed reads of one source's fields, each error naming the source and the field. */
    private static final class Fields {
        private final JsonNode node;
        private final String where;

        Fields(JsonNode node, String where) {
            this.node = node;
            this.where = where;
        }

        SpecException bad(String field, String why) {
            String name =
                    node.path("name").isTextual()
                            ? " (source '" + node.get("name").asText() + "')"
                            : "";
            return new SpecException(where + name + " " + field + ": " + why);
        }

        String string(String field, boolean required) throws SpecException {
            JsonNode v = node.get(field);
            if (v == null || v.isNull()) {
                if (required) {
                    throw bad(field, "is missing");
                }
                return null;
            }
            if (!v.isTextual()) {
                throw bad(field, "must be a string, got " + v);
            }
            if (required && v.asText().isBlank()) {
                throw bad(field, "is empty");
            }
            return v.asText();
        }

        Double positiveNumber(String field) throws SpecException {
            JsonNode v = node.get(field);
            if (v == null || v.isNull()) {
                return null;
            }
            if (!v.isNumber() || !(v.asDouble() > 0) || Double.isInfinite(v.asDouble())) {
                throw bad(field, "must be a number > 0, got " + v);
            }
            return v.asDouble();
        }

        Long positiveLong(String field) throws SpecException {
            JsonNode v = node.get(field);
            if (v == null || v.isNull()) {
                return null;
            }
            if (!v.canConvertToExactIntegral() || !v.isNumber() || v.asLong() < 1) {
                throw bad(field, "must be an integer >= 1, got " + v);
            }
            return v.asLong();
        }
    }
}

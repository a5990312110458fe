package dev.stoker.operators.image;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.SharedData;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.preset.ModelPreset;
import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Stoker's decoder against real Pillow 12.0.0, run at test time: {@code
 * src/test/python/pillow_decode.py} (with the repository's dev venv, {@code .venv/bin/python})
 * writes WebP variants, 16-bit PNGs, and Pillow's decoded RGB for them, for every image of {@code
 * shared/data} that Pillow opens and for every image of {@code scripts/make_sample_dataset.py};
 * each file is then decoded by {@link ImageDecoder} and compared per uint8 channel value.
 *
 * <ul>
 *   <li>Every image: mean |difference| at most {@value #MEAN_LEVELS} level (the floor that makes a
 *       silently broken decoder fail) and, beyond that, identical pixels: JPEG (libjpeg-turbo),
 *       PNG, GIF, BMP and every WebP (lossy at every {@code method} 0-6 and qualities 5-100, alpha,
 *       lossless, animated first frames, first frames at an offset on a larger canvas with and
 *       without the alpha flag; Stoker decodes with the same libwebp version as Pillow, 1.6.0).
 *   <li>16-bit PNGs: Stoker's rule {@code round(v / 257)} (then Pillow's compositing over white),
 *       computed by the script from the known samples, or from Pillow's own {@code I;16} array,
 *       exactly; 16-bit colour PNGs of {@code shared/data}, where Pillow keeps only the high byte
 *       {@code v >> 8}, within one level of Pillow.
 *   <li>The other formats Pillow opens ({@code formats}: TIFF, PSD, ICO, TGA, PNM, PCX, QOI, JPEG
 *       2000) and PNG colour keys ({@code colourkey}): identical to Pillow, or to Stoker's
 *       documented rule where it deliberately differs (reference {@code stoker rule}).
 *   <li>The named {@link #EXCEPTIONS} (CMYK JPEG, lossy JPEG 2000), within their bound.
 *   <li>Files of formats Stoker does not decode ({@code rejected}: AVIF, HEIC, CUR, ...): rejected
 *       as {@code UNSUPPORTED_IMAGE} with a reason that names the format.
 * </ul>
 *
 * <p>Needs libjpeg-turbo (the JPEG decoder whose output is Pillow's; {@code ./stoker} installs it),
 * libwebp (bundled) and the venv ({@code ./stoker test} creates it); it fails, not skips, without
 * them. Prints one line per image and the per-method numbers of the TwelveMonkeys fallback for
 * comparison (docs/parity.md).
 */
class PillowDifferentialDecodeTest {
    static final double MEAN_LEVELS = 1.0;

    /**
     * The only images allowed to differ from their reference at all (largest difference in levels
     * allowed), each for its reason; every other image must be identical, besides 16-bit colour
     * PNGs (reference {@code pillow high byte}: Pillow's {@code v >> 8} vs Stoker's {@code round(v
     * / 257)}, at most 1 level). CMYK JPEGs: Stoker decodes them with TwelveMonkeys, whose CMYK to
     * RGB conversion rounds differently from Pillow's (measured: mean 0.41-0.62, max 1 level;
     * docs/parity.md). Lossy JPEG 2000: JJ2000's irreversible 9/7 wavelet rounds differently from
     * OpenJPEG's (measured: mean 0.0006-0.0011, max 1 level).
     */
    static final Map<String, Integer> EXCEPTIONS =
            Map.of(
                    "shared/bad-inputs/cmyk-jpeg/images/cmyk_adobe.jpg", 1,
                    "shared/bad-inputs/cmyk-jpeg/images/pil_sample_cmyk.jpg", 1,
                    "shared/llava-style/images/cmyk/pil_sample_cmyk.jpg", 1,
                    "formats/jp2_lossy.jp2", 1,
                    "formats/jp2_lossy_rate80_tiled.jp2", 1);

    /** Fewest images per group: the script must not silently lose inputs. */
    private static final Map<String, Integer> MIN_IMAGES =
            Map.of(
                    "webp",
                    120,
                    "16bit",
                    5,
                    "shared",
                    110,
                    "sample",
                    70,
                    "formats",
                    48,
                    "rejected",
                    12,
                    "colourkey",
                    4);

    private static final Pattern METHOD = Pattern.compile("_m([0-6])");

    @TempDir static Path out;

    private static List<JsonNode> manifest;

    @BeforeAll
    static void runPillow() throws Exception {
        Path repo = repositoryRoot();
        Path python = repo.resolve(".venv/bin/python");
        assertThat(Files.isExecutable(python))
                .as(
                        python
                                + " is missing: this test runs real Pillow from the dev venv."
                                + " `./stoker test` creates it, or: python3 -m venv .venv &&"
                                + " .venv/bin/pip install -r python/requirements-dev.txt")
                .isTrue();
        Path script = repo.resolve("operators/src/test/python/pillow_decode.py");
        Path logFile = out.resolve("pillow_decode.log");
        Process p =
                new ProcessBuilder(
                                python.toString(),
                                script.toString(),
                                out.toString(),
                                SharedData.root().toString())
                        .redirectErrorStream(true)
                        .redirectOutput(logFile.toFile())
                        .start();
        boolean finished = p.waitFor(5, TimeUnit.MINUTES);
        if (!finished) {
            p.destroyForcibly();
        }
        String log = Files.readString(logFile, StandardCharsets.UTF_8);
        assertThat(finished).as("pillow_decode.py finished within 5 minutes:\n" + log).isTrue();
        assertThat(p.exitValue()).as("pillow_decode.py failed:\n" + log).isZero();
        System.out.print(log);
        ObjectMapper json = new ObjectMapper();
        manifest = new ArrayList<>();
        try (BufferedReader lines = Files.newBufferedReader(out.resolve("manifest.jsonl"))) {
            for (String line = lines.readLine(); line != null; line = lines.readLine()) {
                manifest.add(json.readTree(line));
            }
        }
    }

    @Test
    void everyImageDecodesAsPillowDecodesIt() throws Exception {
        assertThat(TurboJpeg.available())
                .as("libjpeg-turbo (apt-get install libturbojpeg-java libturbojpeg0-dev)")
                .isTrue();
        assertThat(LibWebpDecoder.available()).as("libwebp (webp-imageio)").isTrue();
        ImageDecoder decoder = new ImageDecoder();
        ImageDecoder fallback = new ImageDecoder(true, false);
        long limit = ModelPreset.QWEN2_VL.visionConfig().maxSourcePixels;
        List<String> failures = new ArrayList<>();
        Map<String, Distance> perMethod = new TreeMap<>();
        Map<String, Distance> perMethodFallback = new TreeMap<>();
        Map<String, Integer> groups = new TreeMap<>();
        for (JsonNode e : manifest) {
            String group = e.get("group").asText();
            String name = group + "/" + e.get("name").asText();
            byte[] encoded = Files.readAllBytes(Path.of(e.get("file").asText()));
            byte[] expected = Files.readAllBytes(Path.of(e.get("rgb").asText()));
            int w = e.get("width").asInt();
            int h = e.get("height").asInt();
            String reference = e.get("reference").asText();
            groups.merge(group, 1, Integer::sum);
            if (group.equals("rejected")) {
                checkRejected(decoder, name, encoded, limit, reference, failures);
                continue;
            }
            RgbImage ours;
            try {
                ours = decoder.decode(encoded, limit);
            } catch (Exception ex) {
                failures.add(name + ": Pillow decodes it, Stoker rejects it: " + ex);
                continue;
            }
            if (ours.width() != w || ours.height() != h) {
                failures.add(
                        name
                                + ": "
                                + ours.width()
                                + "x"
                                + ours.height()
                                + ", Pillow "
                                + w
                                + "x"
                                + h);
                continue;
            }
            Distance d = Distance.of(ours, expected);
            boolean webp = ImageFormat.sniff(encoded) == ImageFormat.WEBP;
            String line = name + " " + w + "x" + h + ": " + d;
            if (webp) {
                String method = method(group, e.get("name").asText());
                perMethod.computeIfAbsent(method, k -> new Distance()).merge(d);
                Distance before = fallbackDistance(fallback, encoded, limit, w, h, expected);
                perMethodFallback.computeIfAbsent(method, k -> new Distance()).merge(before);
                line += "; TwelveMonkeys " + before;
            }
            System.out.println("pillow-diff " + line);
            int allowedMax =
                    EXCEPTIONS.getOrDefault(name, reference.equals("pillow high byte") ? 1 : 0);
            if (d.mean() > MEAN_LEVELS || d.max > allowedMax) {
                failures.add(
                        name
                                + " (reference: "
                                + reference
                                + ", max allowed "
                                + allowedMax
                                + "): "
                                + d);
            }
        }
        for (Map.Entry<String, Distance> m : perMethod.entrySet()) {
            System.out.printf(
                    Locale.ROOT,
                    "pillow-diff webp %s: libwebp %s; TwelveMonkeys %s%n",
                    m.getKey(),
                    m.getValue(),
                    perMethodFallback.get(m.getKey()));
        }
        System.out.println("pillow-diff images per group: " + groups);
        assertThat(groups)
                .as("images compared per group")
                .containsOnlyKeys(
                        "16bit", "colourkey", "formats", "rejected", "sample", "shared", "webp")
                .allSatisfy(
                        (g, n) -> assertThat(n).as(g).isGreaterThanOrEqualTo(MIN_IMAGES.get(g)));
        assertThat(failures).as("decodes that differ from Pillow").isEmpty();
    }

    /**
     * A file of a format Stoker does not decode must be rejected as {@code UNSUPPORTED_IMAGE} with
     * a reason that names the format ({@code expected}).
     */
    private static void checkRejected(
            ImageDecoder decoder,
            String name,
            byte[] encoded,
            long limit,
            String expected,
            List<String> failures) {
        try {
            decoder.decode(encoded, limit);
            failures.add(name + ": decoded, but Stoker has no decoder for " + expected);
        } catch (RejectedRecordException ex) {
            System.out.println("pillow-diff " + name + ": " + ex.reason() + ": " + ex.getMessage());
            if (ex.reason() != RejectReason.UNSUPPORTED_IMAGE
                    || !ex.getMessage().startsWith(expected)) {
                failures.add(
                        name
                                + ": rejected as "
                                + ex.reason()
                                + " '"
                                + ex.getMessage()
                                + "', not UNSUPPORTED_IMAGE naming '"
                                + expected
                                + "'");
            }
        }
    }

    /** The TwelveMonkeys fallback's distance to Pillow, for the record (not asserted). */
    private static Distance fallbackDistance(
            ImageDecoder fallback, byte[] encoded, long limit, int w, int h, byte[] expected)
            throws IOException {
        Distance d = new Distance();
        try {
            RgbImage old = fallback.decode(encoded, limit);
            if (old.width() == w && old.height() == h) {
                return Distance.of(old, expected);
            }
            d.wrongSize = 1;
        } catch (RejectedRecordException ex) {
            d.rejected = 1;
        }
        return d;
    }

    /** "method N" for the generated WebP variants, else the group (sample images are method 0). */
    private static String method(String group, String name) {
        Matcher m = METHOD.matcher(name);
        return group.equals("webp") && m.find() ? "method " + m.group(1) : group + " files";
    }

    private static Path repositoryRoot() {
        for (Path p = Path.of("").toAbsolutePath(); p != null; p = p.getParent()) {
            if (Files.isRegularFile(p.resolve("operators/src/test/python/pillow_decode.py"))) {
                return p;
            }
        }
        throw new IllegalStateException("repository root not found above the working directory");
    }

    /** Mean and max absolute difference per uint8 channel value, images and pixels pooled. */
    static final class Distance {
        long sum;
        long count;
        int max;
        int images;
        int wrongSize;
        int rejected;

        static Distance of(RgbImage ours, byte[] expected) throws IOException {
            int n = ours.width() * ours.height() * 3;
            if (expected.length != n) {
                throw new IOException("reference has " + expected.length + " bytes, not " + n);
            }
            Distance d = new Distance();
            byte[] px = ours.pixels();
            for (int i = 0; i < n; i++) {
                int diff = Math.abs((px[i] & 0xFF) - (expected[i] & 0xFF));
                d.sum += diff;
                d.max = Math.max(d.max, diff);
            }
            d.count = n;
            d.images = 1;
            return d;
        }

        void merge(Distance o) {
            sum += o.sum;
            count += o.count;
            max = Math.max(max, o.max);
            images += o.images;
            wrongSize += o.wrongSize;
            rejected += o.rejected;
        }

        double mean() {
            return count == 0 ? 0 : (double) sum / count;
        }

        @Override
        public String toString() {
            return String.format(
                            Locale.ROOT,
                            "mean %.4f max %d levels%s",
                            mean(),
                            max,
                            images > 1 ? " (" + images + " images)" : "")
                    + (wrongSize > 0 ? ", " + wrongSize + " of another size" : "")
                    + (rejected > 0 ? ", " + rejected + " rejected" : "");
        }
    }
}

package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.tokenize.SequenceLengthPolicy;
import dev.stoker.testkit.ExpectedFaultFilter;
import java.io.IOException;
import java.net.URI;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * One end-to-end test per case of {@code ../shared/data/bad-inputs} that runs without S3: the whole
 * job with its production sinks on a MiniCluster (restart strategy none, so a failure or a restart
 * fails the test), then the exact record-level outcome the case's README states: which record ids
 * are in batches (with their {@code image_grid_thw} where the README gives sizes) and which are
 * dead letters with which stage, reason and message, and samples emitted + dead letters = records.
 *
 * <p>Pixel content (colours, orientation, compositing) is checked per image in the operator unit
 * tests ({@code ImageDecoderTest}); here the grid of the oriented size stands for it.
 */
@ExtendWith(ExpectedFaultFilter.DeadLettersExpected.class) // bad records on purpose, each asserted
class BadInputsITCase {
    private static final int WORLD_SIZE = 2;
    private static final int MICRO_BATCH_SIZE = 3;

    @RegisterExtension static final JobTestCluster CLUSTER = JobTestCluster.local(2);

    private Outcome outcome;

    @AfterEach
    void checkEveryDeadLetterWasAsserted() {
        if (outcome != null) {
            assertThat(outcome.checkedDead)
                    .as("dead letters the test asserted")
                    .isEqualTo(outcome.dead.keySet());
        }
    }

    @Test
    void truncatedFiles() throws Exception {
        Outcome o = run("truncated-files");
        o.assertBatched("trunc-0", "trunc-3");
        o.assertDead(
                "trunc-1",
                RejectReason.CORRUPT_IMAGE,
                "images/truncated_60pct.jpg",
                "truncated JPEG 320x214");
        o.assertDead(
                "trunc-2",
                RejectReason.CORRUPT_IMAGE,
                "images/truncated_progressive_50pct.jpg",
                "truncated JPEG 320x214");
        o.assertDead(
                "trunc-4",
                RejectReason.CORRUPT_IMAGE,
                "images/truncated_in_idat.png",
                "truncated in chunk IDAT");
        o.assertDead(
                "trunc-5",
                RejectReason.CORRUPT_IMAGE,
                "images/idat_crc_mismatch.png",
                "CRC mismatch in chunk IDAT");
        o.assertDead(
                "trunc-6",
                RejectReason.CORRUPT_IMAGE,
                "images/empty.jpg",
                "empty image file (0 bytes)");
        o.assertDead(
                "trunc-7",
                RejectReason.UNSUPPORTED_IMAGE,
                "images/s3_error_body.jpg",
                "not a supported image",
                "<?xml");
        o.assertDead(
                "trunc-8", RejectReason.IMAGE_NOT_FOUND, "images/does_not_exist.jpg", "not found");
        assertThat(o.run.deadLetters()).as("skip counters add up to 7").hasSize(7);
        // missing_eoi.jpg decodes like ok.jpg: same oriented size, so the same grid
        assertThat(o.grids("trunc-3")).containsExactlyElementsOf(o.grids("trunc-0"));
    }

    @Test
    void decompressionBomb() throws Exception {
        Outcome o = run("decompression-bomb");
        o.assertBatched("bomb-0");
        String limit =
                "> limit 178956970"; // StokerOptions.MAX_SOURCE_PIXELS default, Pillow's hard limit
        o.assertDead(
                "bomb-1",
                RejectReason.IMAGE_TOO_MANY_PIXELS,
                "images/png_20000x20000_1bit.png",
                "image too large: PNG 20000x20000",
                limit);
        o.assertDead(
                "bomb-2",
                RejectReason.IMAGE_TOO_MANY_PIXELS,
                "images/gif_65535x65535_header.gif",
                "image too large: GIF 65535x65535",
                limit);
        o.assertDead(
                "bomb-3",
                RejectReason.IMAGE_TOO_MANY_PIXELS,
                "images/jpeg_sof_60000x60000.jpg",
                "image too large: JPEG 60000x60000",
                limit);
    }

    @Test
    void exifOrientation() throws Exception {
        Outcome o = run("exif-orientation");
        List<String> ids =
                List.of(
                        "exif-1",
                        "exif-2",
                        "exif-3",
                        "exif-4",
                        "exif-5",
                        "exif-6",
                        "exif-7",
                        "exif-8",
                        "exif-png6");
        o.assertBatched(ids.toArray(String[]::new));
        // oriented 60x40 -> smart_resize 84 wide x 56 high: grid (1, 4, 6), 6 image tokens;
        // (1, 6, 4) would mean the Orientation tag was ignored
        for (String id : ids) {
            o.assertGrids(id, new long[] {1, 4, 6});
        }
    }

    @Test
    void alphaCompositing() throws Exception {
        Outcome o = run("alpha-compositing");
        o.assertBatched(
                "alpha-0", "alpha-1", "alpha-2", "alpha-3", "alpha-4", "alpha-5", "alpha-6");
        for (String id : o.batchedIds()) {
            assertThat(o.grids(id)).as("%s has one image", id).hasSize(1);
        }
    }

    @Test
    void cmykJpeg() throws Exception {
        Outcome o = run("cmyk-jpeg");
        o.assertBatched("cmyk-0", "cmyk-1");
        assertThat(o.grids("cmyk-0")).hasSize(1);
        assertThat(o.grids("cmyk-1")).hasSize(1);
    }

    @Test
    void grayscaleVariants() throws Exception {
        Outcome o = run("grayscale-variants");
        o.assertBatched("gray-0", "gray-1", "gray-2", "gray-3", "gray-4");
    }

    @Test
    void placeholderMismatch() throws Exception {
        Outcome o = run("placeholder-mismatch");
        o.assertBatched(
                "ph-0-ok",
                "ph-5-same-image-twice",
                "ph-6-placeholder-later-turn",
                "ph-8-text-only",
                "phm-0-ok",
                "phm-1-literal-image-tag-in-text");
        RejectReason mismatch = RejectReason.PLACEHOLDER_MISMATCH;
        o.assertDead("ph-1-no-placeholder", mismatch, "0 placeholders vs 1 images");
        o.assertDead("ph-2-two-placeholders-one-image", mismatch, "2 placeholders vs 1 images");
        o.assertDead("ph-3-placeholder-in-assistant", mismatch, "image in assistant turn 2");
        o.assertDead("ph-4-wrong-case", mismatch, "0 placeholders vs 1 images");
        o.assertDead("ph-7-two-images-one-placeholder", mismatch, "1 placeholders vs 2 images");
        o.assertDead("ph-9-text-only-with-placeholder", mismatch, "1 placeholders vs 0 images");
        o.assertDead("phm-2-image-part-in-assistant", mismatch, "image in assistant turn 2");
        o.assertDead("phm-3-image-part-missing-path", mismatch, "image part without source");
        // no image is invented or dropped
        o.assertGridCount("ph-0-ok", 1);
        o.assertGridCount("ph-5-same-image-twice", 2);
        o.assertGridCount("ph-6-placeholder-later-turn", 1);
        o.assertGridCount("ph-8-text-only", 0);
        o.assertGridCount("phm-0-ok", 1);
        o.assertGridCount("phm-1-literal-image-tag-in-text", 1);
    }

    @Test
    void tinyImages() throws Exception {
        Outcome o = run("tiny-images");
        o.assertBatched(
                "tiny-w1_h1",
                "tiny-w10_h10",
                "tiny-w27_h27",
                "tiny-w28_h28",
                "tiny-w300_h27",
                "tiny-w27_h300",
                "tiny-w56_h56",
                "tiny-w29_h29");
        long[] square56 = {1, 4, 4}; // 56x56, 4 tokens
        for (String id :
                List.of(
                        "tiny-w1_h1",
                        "tiny-w10_h10",
                        "tiny-w27_h27",
                        "tiny-w28_h28",
                        "tiny-w56_h56",
                        "tiny-w29_h29")) {
            o.assertGrids(id, square56);
        }
        o.assertGrids("tiny-w300_h27", new long[] {1, 2, 22}); // 308x28, 11 tokens
        o.assertGrids("tiny-w27_h300", new long[] {1, 22, 2}); // 28x308, 11 tokens
    }

    @Test
    void extremeAspect() throws Exception {
        Outcome o = run("extreme-aspect");
        o.assertBatched(
                "aspect-w14_h2800",
                "aspect-w2800_h14",
                "aspect-w690_h15420-max1003520",
                "aspect-w690_h15420",
                "aspect-w4000_h21");
        o.assertDead(
                "aspect-w10_h2100",
                RejectReason.EXTREME_ASPECT_RATIO,
                "images/w10_h2100.png",
                "aspect ratio 210.0 > 200",
                "10x2100");
        o.assertGrids("aspect-w14_h2800", new long[] {1, 200, 2}); // 28x2800, 100 tokens
        o.assertGrids("aspect-w2800_h14", new long[] {1, 2, 200}); // 2800x28, 100 tokens
        o.assertGrids(
                "aspect-w690_h15420-max1003520", new long[] {1, 338, 14}); // 196x4732, 1183 tokens
        o.assertGrids("aspect-w690_h15420", new long[] {1, 1102, 50}); // 700x15428, 13775 tokens
        o.assertGrids("aspect-w4000_h21", new long[] {1, 2, 286}); // 4004x28, 143 tokens
        assertThat(o.sample("aspect-w690_h15420").tokens())
                .as("sequence holds the 13775 image tokens")
                .isGreaterThan(13775);
    }

    @Test
    void emptyTurns() throws Exception {
        Outcome o = run("empty-turns");
        o.assertBatched("empty-0-ok", "empty-11-messages-empty-text-part");
        RejectReason invalid = RejectReason.INVALID_RECORD;
        o.assertDead(
                "empty-1-assistant-empty-string",
                invalid,
                "assistant turn 2 is empty",
                "no trainable assistant tokens");
        o.assertDead(
                "empty-2-assistant-whitespace",
                invalid,
                "assistant turn 2 is empty or whitespace-only");
        o.assertDead("empty-3-ends-with-user", invalid, "ends with user turn 3");
        o.assertDead("empty-4-no-conversations", invalid, "'conversations' is missing");
        o.assertDead("empty-5-empty-list", invalid, "no messages");
        o.assertDead("empty-6-null-value", invalid, "'value' is null");
        o.assertDead("empty-7-unknown-role", invalid, "unknown role 'bot'");
        o.assertDead("empty-8-two-user-turns-in-a-row", invalid, "roles out of order: turn 2");
        o.assertDead("empty-9-starts-with-assistant", invalid, "roles out of order: turn 1");
        o.assertDead("empty-10-system-only", invalid, "no assistant turn");
        o.assertGridCount("empty-11-messages-empty-text-part", 1);
    }

    /** The bad-encoding case, through the real source and parser. */
    @Test
    void badEncodingJsonl() throws Exception {
        Outcome o = run("bad-encoding-jsonl");
        o.assertBatched("enc-1-ok", "enc-5-crlf", "enc-10-cjk-ok", "enc-11-last-line-no-newline");
        o.assertDead(
                "enc-2-latin1", RejectReason.INVALID_UTF8, "invalid UTF-8 at byte offset", "0xE9");
        o.assertDead(
                "enc-3-invalid-continuation",
                RejectReason.INVALID_UTF8,
                "invalid UTF-8 at byte offset",
                "0xC3");
        o.assertDead(
                "enc-6-lone-surrogate-escape",
                RejectReason.INVALID_RECORD,
                "invalid Unicode scalar",
                "\\ud800");
        o.assertDead(
                "enc-8-nul-byte",
                RejectReason.MALFORMED_JSON,
                "Illegal unquoted character ((CTRL-CHAR, code 0))");
        o.assertDead("enc-9-truncated-json", RejectReason.MALFORMED_JSON, "malformed JSON");
        // blank (line 4) and whitespace-only (line 7) lines are not records
        assertThat(o.run.plan().numRecords()).isEqualTo(9);
        Map<String, Long> lines = new HashMap<>();
        o.run.deadLetters().forEach(dl -> lines.put(o.idOf(dl), dl.get("line").asLong()));
        assertThat(lines)
                .containsExactlyInAnyOrderEntriesOf(
                        Map.of(
                                "enc-2-latin1",
                                2L,
                                "enc-3-invalid-continuation",
                                3L,
                                "enc-6-lone-surrogate-escape",
                                6L,
                                "enc-8-nul-byte",
                                8L,
                                "enc-9-truncated-json",
                                9L));
        assertThat(o.sample("enc-5-crlf").line()).isEqualTo(5);
        assertThat(o.sample("enc-11-last-line-no-newline").line()).isEqualTo(11);
    }

    /**
     * The 5.2M-character answer parses (no parser default rejects it) and then meets the token
     * limit: with the default {@code stoker.max-seq-len} (qwen2-vl: 32768) and policy DROP it is a
     * {@code SEQUENCE_TOO_LONG} dead letter naming its length and the limit, its slot is
     * back-filled, and every rank still gets every step with B rows.
     */
    @Test
    void longLines() throws Exception {
        Configuration conf = new Configuration();
        conf.set(StokerOptions.MAX_LINE_LENGTH, MemorySize.ofMebiBytes(8));
        Outcome o = run("long-lines", conf);
        o.assertBatched("long-0-ok", "long-3-ok-after");
        o.assertDead(
                "long-2-9M-chars",
                RejectReason.LINE_TOO_LONG,
                "record larger than 8 MiB",
                "line of 9000164 bytes",
                "maximum line length of 8388608 bytes");
        o.assertDead(
                "long-1-5.2M-chars",
                RejectReason.SEQUENCE_TOO_LONG,
                "tokens > max-seq-len 32768 (policy DROP)");
        String message = o.dead.get("long-1-5.2M-chars").get("message").asText();
        long length = Long.parseLong(message.replaceAll("^sequence of (\\d+) tokens .*$", "$1"));
        assertThat(length).as("tokens of the 5.2M-char record").isGreaterThan(500_000);
        o.assertEveryRankGetsEveryStep();
        JsonNode dead = o.dead.get("long-1-5.2M-chars");
        long index = dead.get("sample_index").asLong();
        assertThat(
                        o.batch(o.run.plan().stepOf(index), o.run.plan().rankOf(index))
                                .backfilledSlots())
                .as("slot of the dropped sample is back-filled")
                .contains(o.run.plan().slotOf(index));
    }

    /** The same case with policy TRUNCATE: the long answer is cut to exactly 32768 tokens. */
    @Test
    void longLinesTruncated() throws Exception {
        Configuration conf = new Configuration();
        conf.set(StokerOptions.MAX_LINE_LENGTH, MemorySize.ofMebiBytes(8));
        conf.set(StokerOptions.MAX_SEQ_LEN_POLICY, SequenceLengthPolicy.TRUNCATE);
        Outcome o = run("long-lines", conf);
        o.assertBatched("long-0-ok", "long-1-5.2M-chars", "long-3-ok-after");
        o.assertDead("long-2-9M-chars", RejectReason.LINE_TOO_LONG, "record larger than 8 MiB");
        assertThat(o.sample("long-1-5.2M-chars").tokens())
                .as("the 5.2M-char answer is truncated to stoker.max-seq-len")
                .isEqualTo(32768);
        o.assertGridCount("long-1-5.2M-chars", 1);
        o.assertEveryRankGetsEveryStep();
    }

    @Test
    void animatedImages() throws Exception {
        Outcome o = run("animated-images");
        o.assertBatched("anim-0", "anim-1", "anim-2", "anim-3");
        // exactly one image each, the first frame on the logical canvas:
        // 40x30 -> 84x56 (grid 1x4x6); 245x245 -> 252x252 (grid 1x18x18)
        o.assertGrids("anim-0", new long[] {1, 4, 6});
        o.assertGrids("anim-1", new long[] {1, 4, 6});
        o.assertGrids("anim-2", new long[] {1, 18, 18});
        o.assertGrids("anim-3", new long[] {1, 18, 18});
    }

    private Outcome run(String name) throws Exception {
        return run(name, new Configuration());
    }

    private Outcome run(String name, Configuration conf) throws Exception {
        Path root = SharedData.dataDir().resolve("bad-inputs").resolve(name);
        JobRun.Result result =
                JobRun.run(root, CLUSTER.outputRoot(), WORLD_SIZE, MICRO_BATCH_SIZE, conf);
        result.assertAccounted();
        outcome = new Outcome(result);
        outcome.assertEveryDeadLetterNamesItsRecord();
        return outcome;
    }

    /**
     * A run's samples and dead letters by record id (read from the JSONL independently of the job).
     */
    private static final class Outcome {
        final JobRun.Result run;
        final Map<String, JobRun.Sample> batched = new HashMap<>();
        final Map<String, JsonNode> dead = new HashMap<>();
        private final Map<String, Map<Long, String>> idsByFile = new HashMap<>();
        private final Set<String> checkedDead = new java.util.HashSet<>();

        Outcome(JobRun.Result run) throws IOException {
            this.run = run;
            for (JobRun.Sample s : run.samples()) {
                String file = s.location().substring(0, s.location().lastIndexOf(':'));
                String id = id(file, s.line());
                assertThat(batched.put(id, s)).as("record %s batched once", id).isNull();
            }
            for (JsonNode dl : run.deadLetters()) {
                String id = idOf(dl);
                assertThat(dead.put(id, dl)).as("record %s dead-lettered once", id).isNull();
            }
        }

        String idOf(JsonNode dl) {
            try {
                return id(dl.get("file").asText(), dl.get("line").asLong());
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }

        private String id(String file, long line) throws IOException {
            Map<Long, String> ids = idsByFile.get(file);
            if (ids == null) {
                ids =
                        JobRun.idsByLine(
                                Path.of(
                                        URI.create(
                                                file.startsWith("file:") ? file : "file:" + file)));
                idsByFile.put(file, ids);
            }
            String id = ids.get(line);
            assertThat(id).as("record id of %s:%d", file, line).isNotNull();
            return id;
        }

        Set<String> batchedIds() {
            return batched.keySet();
        }

        /** Exactly these records are in batches. */
        void assertBatched(String... ids) {
            assertThat(batched.keySet()).as("records in batches").containsExactlyInAnyOrder(ids);
        }

        /**
         * {@code id} is a dead letter with {@code reason}, its stage, and a message that contains
         * each fragment. Every dead letter of a run must be asserted this way (checked after each
         * test), so together with {@link #assertBatched} the whole outcome is exact.
         */
        void assertDead(String id, RejectReason reason, String... fragments) {
            JsonNode dl = dead.get(id);
            assertThat(dl)
                    .as("dead letter for %s (dead letters: %s)", id, run.deadLetters())
                    .isNotNull();
            assertThat(dl.get("reason").asText())
                    .as("reason of %s: %s", id, dl)
                    .isEqualTo(reason.name());
            assertThat(dl.get("stage").asText())
                    .as("stage of %s", id)
                    .isEqualTo(reason.stage().name().toLowerCase(Locale.ROOT));
            for (String fragment : fragments) {
                assertThat(dl.get("message").asText()).as("message of %s", id).contains(fragment);
            }
            checkedDead.add(id);
        }

        /**
         * Every dead letter names its JSONL file, line and record id (also for lines that are cut,
         * not UTF-8 or not JSON: their id precedes the defect in every case), and has a message.
         */
        void assertEveryDeadLetterNamesItsRecord() {
            for (Map.Entry<String, JsonNode> e : dead.entrySet()) {
                JsonNode dl = e.getValue();
                assertThat(dl.get("file").asText()).endsWith(".jsonl");
                assertThat(dl.get("line").asLong()).isPositive();
                assertThat(dl.get("message").asText()).isNotBlank();
                assertThat(dl.get("record_id").asText())
                        .as("record_id of %s", dl)
                        .isEqualTo(e.getKey());
            }
        }

        JobRun.Sample sample(String id) {
            JobRun.Sample s = batched.get(id);
            assertThat(s).as("sample %s", id).isNotNull();
            return s;
        }

        List<long[]> grids(String id) {
            return sample(id).gridThw();
        }

        void assertGrids(String id, long[]... expected) {
            List<long[]> actual = new ArrayList<>(grids(id));
            assertThat(actual).as("image_grid_thw of %s", id).containsExactly(expected);
        }

        void assertGridCount(String id, int images) {
            assertThat(grids(id)).as("images of %s", id).hasSize(images);
        }

        /** Every rank has a batch file for every step of the plan, each with B rows. */
        void assertEveryRankGetsEveryStep() {
            BatchPlan plan = run.plan();
            assertThat(run.batches()).hasSize((int) (plan.numSteps() * plan.worldSize()));
            for (JobRun.Batch b : run.batches()) {
                assertThat(b.rows())
                        .as("rows of batch (step %d, rank %d)", b.step(), b.rank())
                        .isEqualTo(plan.microBatchSize());
            }
        }

        JobRun.Batch batch(long step, int rank) {
            return run.batches().stream()
                    .filter(b -> b.step() == step && b.rank() == rank)
                    .findFirst()
                    .orElseThrow();
        }
    }
}

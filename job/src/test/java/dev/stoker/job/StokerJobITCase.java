package dev.stoker.job;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.tokenize.ChatTokenizer;
import dev.stoker.testkit.ExpectedFaultFilter;
import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Runs the whole job with its production sinks on a MiniCluster over each real sample dataset and
 * checks the accounting: every record is either in exactly one batch or in the dead-letter output
 * with its file, line and reason.
 */
@ExtendWith(ExpectedFaultFilter.DeadLettersExpected.class) // the escaping record, asserted
class StokerJobITCase {
    private static final int WORLD_SIZE = 2;
    private static final int MICRO_BATCH_SIZE = 3;
    private static final ObjectMapper JSON = new ObjectMapper();

    @RegisterExtension static final JobTestCluster CLUSTER = JobTestCluster.local(2);

    @ParameterizedTest
    @ValueSource(strings = {"llava-style", "qwen-messages", "llamafactory-sharegpt"})
    void everyRecordIsBatchedOrDeadLettered(String dataset) throws Exception {
        Path root = SharedData.dataDir().resolve(dataset);
        Configuration conf = new Configuration();
        conf.set(StokerOptions.MAX_PIXELS, 1003520L); // the common 1280-token fine-tuning setting
        JobRun.Result run =
                JobRun.run(root, CLUSTER.outputRoot(), WORLD_SIZE, MICRO_BATCH_SIZE, conf);
        Path jobDir = run.jobDir();

        Map<Long, String> recordImages = readRecords(root.resolve("train.jsonl"));
        long numRecords = recordImages.size();
        long numSteps =
                (numRecords + WORLD_SIZE * MICRO_BATCH_SIZE - 1) / (WORLD_SIZE * MICRO_BATCH_SIZE);
        assertThat(run.plan().numRecords()).isEqualTo(numRecords);
        assertThat(run.plan().numSteps()).isEqualTo(numSteps);
        run.assertAccounted();

        List<Long> batched = run.samples().stream().map(JobRun.Sample::sampleIndex).toList();
        for (JsonNode dl : run.deadLetters()) {
            assertThat(dl.get("file").asText()).endsWith("train.jsonl");
            assertThat(dl.get("line").asLong()).isPositive();
            assertThat(dl.get("reason").asText()).isNotEmpty();
            assertThat(dl.get("message").asText()).isNotEmpty();
        }

        recordImages.forEach(
                (index, images) -> {
                    if (isPlainPhotoRecord(dataset, images)) {
                        assertThat(batched)
                                .as("plain photo record %d (%s) is written", index, images)
                                .contains(index);
                    }
                });
        JsonNode manifest = JSON.readTree(jobDir.resolve("manifest.json").toFile());
        assertThat(manifest.get("num_records").asLong()).isEqualTo(numRecords);
        assertThat(manifest.get("num_steps").asLong()).isEqualTo(numSteps);
    }

    /**
     * Annotations and images apart on the local filesystem: the JSONL (llava-style's records plus
     * one whose image path leaves the image root) in a directory of its own, {@code
     * stoker.image.root} the shared llava-style directory. Every plain photo record is batched
     * (found only through the image root: the JSONL's directory holds no image) and the escaping
     * record is {@code UNSAFE_PATH} at the parse stage, before any read.
     */
    @Test
    void imagesResolveAgainstALocalImageRootApartFromTheJsonl(@TempDir Path dir) throws Exception {
        Path annotations = writeAnnotationsWithEscape(dir);
        Configuration conf = new Configuration();
        conf.set(StokerOptions.MAX_PIXELS, 1003520L);
        conf.set(StokerOptions.IMAGE_ROOT, SharedData.dataDir().resolve("llava-style").toString());
        JobRun.Result run =
                JobRun.run(
                        annotations.getParent(),
                        CLUSTER.outputRoot(),
                        WORLD_SIZE,
                        MICRO_BATCH_SIZE,
                        conf);
        run.assertAccounted();
        assertImageRootOutcome(run, annotations);
    }

    /**
     * A three-source mixture of the shared datasets in their three record formats (each source
     * given its format), shuffled over two epochs: llava-style (38 records) down-sampled to 20 per
     * epoch, qwen-messages (19) with its own pixel budget and system prompt, llamafactory-sharegpt
     * (6) up-sampled twice. Each epoch holds exactly each source's count (samples + dead letters,
     * each naming its source); the down-sampled source uses all 38 records before it repeats one (2
     * of 40 repeat), the up-sampled one every record 4 times; the pixel budget (but for images with
     * a budget of their own) and the prompt show in the batches of their source only.
     */
    @Test
    void aMixtureGivesEachSourceItsCountPerEpochAndItsOwnSettings(@TempDir Path dir)
            throws Exception {
        Path data = SharedData.dataDir();
        Path spec = dir.resolve("mixture.yaml");
        Files.writeString(
                spec,
                String.join(
                        "\n",
                        "sources:",
                        "  - name: llava",
                        "    path: " + data.resolve("llava-style"),
                        "    count: 20",
                        "    format: llava",
                        "  - name: messages",
                        "    path: " + data.resolve("qwen-messages"),
                        "    max_pixels: 200704",
                        "    system_prompt: You read charts.",
                        "    format: messages",
                        "  - name: sharegpt",
                        "    path: " + data.resolve("llamafactory-sharegpt"),
                        "    repeat: 2",
                        "    format: sharegpt",
                        ""));
        Configuration conf = new Configuration();
        conf.set(StokerOptions.MIXTURE_PATH, spec.toString());
        conf.set(StokerOptions.MAX_PIXELS, 1003520L);
        conf.set(StokerOptions.SHUFFLE, true);
        conf.set(StokerOptions.EPOCHS, 2);
        JobRun.Result run =
                JobRun.run(data, CLUSTER.outputRoot(), WORLD_SIZE, MICRO_BATCH_SIZE, conf);
        run.assertAccounted();
        assertThat(run.plan().numRecords()).isEqualTo(20 + 19 + 12);
        assertThat(run.counts())
                .contains("llava: planned=40, read=40")
                .contains("messages: planned=38, read=38")
                .contains("sharegpt: planned=24, read=24");

        Map<String, String> dirToSource =
                Map.of(
                        "llava-style", "llava",
                        "qwen-messages", "messages",
                        "llamafactory-sharegpt", "sharegpt");
        // per (source, epoch) the records taken, from the batches and the dead letters
        Map<String, List<String>> taken = new java.util.TreeMap<>();
        for (JobRun.Sample s : run.samples()) {
            String file = s.location().substring(0, s.location().lastIndexOf(':'));
            String source =
                    dirToSource.get(
                            Path.of(java.net.URI.create(file))
                                    .getParent()
                                    .getFileName()
                                    .toString());
            // the batch names each sample's mixture source, the one its file belongs to
            assertThat(s.source()).as("source of %s", s.location()).isEqualTo(source);
            taken.computeIfAbsent(
                            source + "@" + run.plan().epochOf(s.sampleIndex()),
                            k -> new ArrayList<>())
                    .add(file + ":" + s.line());
        }
        for (JsonNode dl : run.deadLetters()) {
            String source = dl.get("source").asText();
            assertThat(dirToSource.values()).contains(source);
            // every record is in its source's format
            assertThat(dl.get("stage").asText()).as(dl.toString()).isNotEqualTo("parse");
            taken.computeIfAbsent(
                            source + "@" + run.plan().epochOf(dl.get("sample_index").asLong()),
                            k -> new ArrayList<>())
                    .add(dl.get("file").asText() + ":" + dl.get("line").asLong());
        }
        for (int epoch = 0; epoch < 2; epoch++) {
            assertThat(taken.get("llava@" + epoch)).hasSize(20);
            assertThat(taken.get("messages@" + epoch)).hasSize(19).doesNotHaveDuplicates();
            assertThat(taken.get("sharegpt@" + epoch)).hasSize(12);
        }
        List<String> llava = new ArrayList<>(taken.get("llava@0"));
        llava.addAll(taken.get("llava@1"));
        assertThat(new java.util.HashSet<>(llava)).hasSize(38);
        List<String> sharegpt = new ArrayList<>(taken.get("sharegpt@0"));
        sharegpt.addAll(taken.get("sharegpt@1"));
        assertThat(
                        sharegpt.stream()
                                .collect(
                                        java.util.stream.Collectors.groupingBy(
                                                x -> x, java.util.stream.Collectors.counting())))
                .hasSize(6)
                .allSatisfy((record, n) -> assertThat(n).isEqualTo(4L));

        long[] prompt;
        try (ChatTokenizer tokenizer = ChatTokenizer.open(data.resolve("tokenizers/qwen3"))) {
            prompt = tokenizer.encodeText("You read charts.");
        }
        long budget = 200704 / (14 * 14);
        // records whose images carry their own max_pixels keep it (qwen-vl-utils' rule)
        List<String> lines = Files.readAllLines(data.resolve("qwen-messages/train.jsonl"));
        Set<Long> ownBudget = new java.util.HashSet<>();
        for (int i = 0; i < lines.size(); i++) {
            if (lines.get(i).contains("\"max_pixels\"")) {
                ownBudget.add(i + 1L);
            }
        }
        assertThat(ownBudget).hasSize(2);
        boolean llavaAboveBudget = false;
        int messagesWithPrompt = 0;
        for (JobRun.Sample s : run.samples()) {
            boolean messages = s.location().contains("/qwen-messages/");
            for (long[] thw : s.gridThw()) {
                if (messages) {
                    if (!ownBudget.contains(s.line())) {
                        assertThat(thw[0] * thw[1] * thw[2])
                                .as(s.location())
                                .isLessThanOrEqualTo(budget);
                    }
                } else if (s.location().contains("/llava-style/")) {
                    llavaAboveBudget |= thw[0] * thw[1] * thw[2] > budget;
                }
            }
            boolean hasPrompt = contains(s.inputIds(), prompt);
            if (messages) {
                messagesWithPrompt += hasPrompt ? 1 : 0;
            } else {
                assertThat(hasPrompt).as("sample %s has no charts prompt", s.location()).isFalse();
            }
        }
        assertThat(llavaAboveBudget).as("the other sources keep the job's budget").isTrue();
        assertThat(messagesWithPrompt).isPositive();
    }

    /**
     * The next curriculum stage: a run over one dataset, then another dataset taking over at a
     * stated step ({@code stoker.mixture.start-step}, with the resume step before it) in the same
     * job directory. The new stage's batches are exactly those of a fresh run of its dataset,
     * shifted by the start step; the manifest records the start step and both stages; a resume that
     * would change the mixture without saying so, or a start step after the first step produced, is
     * refused at start-up.
     */
    @Test
    void aNewMixtureTakesOverAtAStatedStepAndTheManifestKeepsThePlanHistory() throws Exception {
        Path stage1 = SharedData.dataDir().resolve("llamafactory-sharegpt");
        Path stage2 = SharedData.dataDir().resolve("llava-style");
        Configuration shuffled = new Configuration();
        shuffled.set(StokerOptions.SHUFFLE, true);
        shuffled.set(StokerOptions.SHUFFLE_SEED, 5L);

        JobRun.Result fresh =
                JobRun.run(
                        stage2, CLUSTER.freshOutputRoot(), WORLD_SIZE, MICRO_BATCH_SIZE, shuffled);
        JsonNode freshManifest = JSON.readTree(fresh.jobDir().resolve("manifest.json").toFile());

        Path root = CLUSTER.freshOutputRoot();
        JobRun.Result first = JobRun.run(stage1, root, WORLD_SIZE, MICRO_BATCH_SIZE, shuffled);
        long start = first.plan().numSteps();
        JsonNode firstManifest = JSON.readTree(first.jobDir().resolve("manifest.json").toFile());
        Configuration next = new Configuration(shuffled);
        next.set(StokerOptions.MIXTURE_START_STEP, start);
        next.set(StokerOptions.RESUME_STEP, start - 1);
        JobRun.Result second = JobRun.run(stage2, root, WORLD_SIZE, MICRO_BATCH_SIZE, next);
        second.assertAccounted();
        assertThat(second.firstStep()).isEqualTo(start);
        assertThat(second.plan().numSteps()).isEqualTo(start + fresh.plan().numSteps());

        long shift = start * WORLD_SIZE * MICRO_BATCH_SIZE;
        Map<Long, JobRun.Sample> expected = fresh.samplesByIndex();
        assertThat(second.samples()).hasSameSizeAs(fresh.samples());
        for (JobRun.Sample s : second.samples()) {
            JobRun.Sample e = expected.get(s.sampleIndex() - shift);
            assertThat(e).as("slot %d of the new stage", s.sampleIndex()).isNotNull();
            assertThat(s.source()).isEqualTo(e.source());
            assertThat(s.inputIds()).isEqualTo(e.inputIds());
            assertThat(s.step()).isEqualTo(e.step() + start);
            assertThat(s.rank()).isEqualTo(e.rank());
        }
        assertThat(
                        second.deadLetters().stream()
                                .map(
                                        d ->
                                                d.get("sample_index").asLong()
                                                        - shift
                                                        + " "
                                                        + d.get("line"))
                                .sorted()
                                .toList())
                .isEqualTo(
                        fresh.deadLetters().stream()
                                .map(d -> d.get("sample_index").asLong() + " " + d.get("line"))
                                .sorted()
                                .toList());

        JsonNode manifest = JSON.readTree(second.jobDir().resolve("manifest.json").toFile());
        assertThat(manifest.get("mixture_start_step").asLong()).isEqualTo(start);
        assertThat(manifest.get("dataset_fingerprint"))
                .isEqualTo(freshManifest.get("dataset_fingerprint"));
        JsonNode history = manifest.get("plan_history");
        assertThat(history).hasSize(2);
        assertThat(history.get(0).get("dataset_fingerprint"))
                .isEqualTo(firstManifest.get("dataset_fingerprint"));
        assertThat(history.get(0).get("mixture_start_step").asLong()).isZero();
        assertThat(history.get(0).get("mixture").asText()).isEqualTo(stage1.toString());
        assertThat(history.get(1).get("dataset_fingerprint"))
                .isEqualTo(freshManifest.get("dataset_fingerprint"));
        assertThat(history.get(1).get("mixture_start_step").asLong()).isEqualTo(start);
        assertThat(history.get(1).get("num_records").asLong()).isEqualTo(fresh.plan().numRecords());

        // resuming inside the new stage with the first stage's dataset, or without the stage's
        // start step, is an implicit change of the mixture: refused, naming what to pass
        Configuration implicit = JobConfigs.config(stage1.toString(), root, WORLD_SIZE, 3);
        implicit.set(StokerOptions.RESUME_STEP, start + 1);
        assertThatThrownBy(
                        () ->
                                StokerJob.build(
                                        StreamExecutionEnvironment.getExecutionEnvironment(),
                                        implicit))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining(
                        "Step " + (start + 1) + " was produced by the stage of mixture " + stage2)
                .hasMessageContaining(
                        "to change the mixture at this resume pass --stoker.mixture.start-step "
                                + (start + 2));
        Configuration late = JobConfigs.config(stage2.toString(), root, WORLD_SIZE, 3);
        late.set(StokerOptions.MIXTURE_START_STEP, start + 5);
        late.set(StokerOptions.RESUME_STEP, start + 1);
        assertThatThrownBy(
                        () ->
                                StokerJob.build(
                                        StreamExecutionEnvironment.getExecutionEnvironment(), late))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining(
                        "--stoker.mixture.start-step "
                                + (start + 5)
                                + " is after the first step this submission produces ("
                                + (start + 2));
    }

    /**
     * An elastic resume: a run at W=4, B=2 that the trainer left after step 2 goes on (without its
     * savepoint, with {@code stoker.resume-step} and nothing else new) at W=2, B=4, and after step
     * 6 at W=3, B=3. Each resume starts a stage at its first step from the record after the last
     * one trained on; together the three runs hold every record of both epochs exactly once, at the
     * position of the mixture's order an uninterrupted run has it (sample or dead letter), the
     * manifest keeps the three stages, a start position other than the trainer's is refused, and so
     * is restoring a savepoint into the new stage. Unpacked on one node; packed with another number
     * of GPU nodes at each resume (2 nodes of 2 ranks, then 1 of 2, then 3 of 1: a sink and an ack
     * server per node).
     */
    @ParameterizedTest(name = "packed={0}")
    @ValueSource(booleans = {false, true})
    void anotherWorldSizeAtAResumeGoesOnAtTheNextRecordNotTrainedOn(boolean packed)
            throws Exception {
        Path dataset = SharedData.dataDir().resolve("llava-style"); // 38 records, some rejected
        Configuration conf = new Configuration();
        conf.set(StokerOptions.PACKING_ENABLED, packed);
        conf.set(StokerOptions.SHUFFLE, true);
        conf.set(StokerOptions.SHUFFLE_SEED, 11L);
        conf.set(StokerOptions.EPOCHS, 2);
        Path root = CLUSTER.freshOutputRoot();
        // the uninterrupted run
        JobRun.Result w4 = JobRun.run(dataset, root, 4, 2, onNodes(conf, packed ? 2 : 1));
        // each run's dead letters on their own: the slot indices of the runs' plans overlap
        Path deadLetters = w4.jobDir().resolve("dead-letters");
        JobRun.deleteOutputRoot(deadLetters);
        Configuration at2 = onNodes(conf, 1);
        at2.set(StokerOptions.RESUME_STEP, 2L);
        JobRun.Result w2 = JobRun.run(dataset, root, 2, 4, at2);
        JobRun.deleteOutputRoot(deadLetters);
        Configuration at6 = onNodes(conf, packed ? 3 : 1);
        at6.set(StokerOptions.RESUME_STEP, 6L);
        JobRun.Result w3 = JobRun.run(dataset, root, 3, 3, at6);
        long n = w4.plan().numRecords();
        assertThat(w2.plan().startStep()).isEqualTo(3);
        assertThat(w2.plan().startPosition()).isEqualTo(24); // steps 0..2 of 8 samples
        assertThat(w3.plan().startPosition()).isEqualTo(n + 16); // steps 5, 6: epoch 1's first 16
        w2.assertAccounted();
        w3.assertAccounted();

        Map<Long, String> expected = byMixturePosition(w4, 0, w4.plan().numSteps());
        Map<Long, String> elastic = new HashMap<>(byMixturePosition(w4, 0, 3));
        for (Map.Entry<Long, String> e : byMixturePosition(w2, 3, 7).entrySet()) {
            assertThat(elastic.put(e.getKey(), e.getValue()))
                    .as("position %d", e.getKey())
                    .isNull();
        }
        for (Map.Entry<Long, String> e :
                byMixturePosition(w3, 7, w3.plan().numSteps()).entrySet()) {
            assertThat(elastic.put(e.getKey(), e.getValue()))
                    .as("position %d", e.getKey())
                    .isNull();
        }
        assertThat(expected).hasSize((int) (2 * n));
        assertThat(elastic).isEqualTo(expected);

        JsonNode manifest = JSON.readTree(w3.jobDir().resolve("manifest.json").toFile());
        assertThat(manifest.get("packing_max_tokens").isNull()).isEqualTo(!packed);
        JsonNode history = manifest.get("plan_history");
        assertThat(history).hasSize(3);
        assertThat(history.get(1).get("world_size").asInt()).isEqualTo(2);
        assertThat(history.get(1).get("mixture_start_step").asLong()).isEqualTo(3);
        assertThat(history.get(2).get("mixture_start_step").asLong()).isEqualTo(7);
        assertThat(history.get(2).get("mixture_start_position").asLong()).isEqualTo(n + 16);

        Configuration wrong = JobConfigs.config(dataset.toString(), root, 2, 2);
        wrong.addAll(conf);
        wrong.set(StokerOptions.RESUME_STEP, 8L);
        wrong.set(StokerOptions.MIXTURE_START_POSITION, 5L);
        assertThatThrownBy(
                        () ->
                                StokerJob.build(
                                        StreamExecutionEnvironment.getExecutionEnvironment(),
                                        wrong))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining("--stoker.mixture.start-position 5 is not where the trainer");
        Configuration withSavepoint = JobConfigs.config(dataset.toString(), root, 2, 2);
        withSavepoint.addAll(conf);
        withSavepoint.set(StokerOptions.RESUME_STEP, 8L);
        withSavepoint.set(
                StateRecoveryOptions.SAVEPOINT_PATH, root.resolve("sp").toUri().toString());
        assertThatThrownBy(
                        () ->
                                StokerJob.build(
                                        StreamExecutionEnvironment.getExecutionEnvironment(),
                                        withSavepoint))
                .isInstanceOf(IllegalConfigurationException.class)
                .hasMessageContaining("but it restores a savepoint");
    }

    /**
     * {@code conf} for {@code nodes} GPU nodes: a sink per node, each serving its node's acks on a
     * free loopback port (the MiniCluster's nodes share one output root).
     */
    private static Configuration onNodes(Configuration conf, int nodes) throws IOException {
        Configuration out = new Configuration(conf);
        if (nodes > 1) {
            List<String> addresses = new ArrayList<>();
            for (int n = 0; n < nodes; n++) {
                try (ServerSocket socket =
                        new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
                    addresses.add("127.0.0.1:" + socket.getLocalPort());
                }
            }
            out.set(StokerOptions.TOPOLOGY_NODES, nodes);
            out.set(StokerOptions.TOPOLOGY_ACK_ADDRESSES, addresses);
        }
        return out;
    }

    /**
     * Position in the mixture's order ({@code epoch * N + position}) -> the record there, as {@code
     * "sample <location>"} or {@code "dead letter <file>:<line>"}, of the run's steps {@code from
     * .. to - 1}.
     */
    private static Map<Long, String> byMixturePosition(JobRun.Result run, long from, long to) {
        Map<Long, String> out = new HashMap<>();
        long n = run.plan().numRecords();
        for (JobRun.Sample s : run.samples()) {
            if (s.step() >= from && s.step() < to) {
                long i = s.sampleIndex();
                out.put(
                        run.plan().epochOf(i) * n + run.plan().positionOf(i),
                        "sample " + s.location());
            }
        }
        for (JsonNode dl : run.deadLetters()) {
            long i = dl.get("sample_index").asLong();
            if (run.plan().stepOf(i) >= from && run.plan().stepOf(i) < to) {
                out.put(
                        run.plan().epochOf(i) * n + run.plan().positionOf(i),
                        "dead letter " + dl.get("file").asText() + ":" + dl.get("line").asLong());
            }
        }
        return out;
    }

    private static boolean contains(long[] ids, long[] part) {
        outer:
        for (int i = 0; i + part.length <= ids.length; i++) {
            for (int k = 0; k < part.length; k++) {
                if (ids[i + k] != part[k]) {
                    continue outer;
                }
            }
            return true;
        }
        return false;
    }

    /** An image path that leaves the image root (into the annotations' directory). */
    static final String ESCAPING_IMAGE = "../annotations/escape.png";

    /**
     * Writes {@code dir/annotations/train.jsonl}: llava-style's records, then one record whose
     * image is {@link #ESCAPING_IMAGE}, and an image at that place so that only the escape rule
     * stops it.
     *
     * @return the JSONL file
     */
    static Path writeAnnotationsWithEscape(Path dir) throws IOException {
        Path llava = SharedData.dataDir().resolve("llava-style");
        Path annotations = Files.createDirectories(dir.resolve("annotations"));
        Path jsonl = annotations.resolve("train.jsonl");
        String escape =
                "{\"id\": \"escape-1\", \"image\": \""
                        + ESCAPING_IMAGE
                        + "\", \"conversations\": [{\"from\": \"human\", \"value\":"
                        + " \"<image>\\nWhat is this?\"}, {\"from\": \"gpt\", \"value\":"
                        + " \"A file outside the image root.\"}]}\n";
        Files.writeString(
                jsonl,
                Files.readString(llava.resolve("train.jsonl")).stripTrailing() + "\n" + escape);
        Files.copy(llava.resolve("images/photos/coffee.png"), annotations.resolve("escape.png"));
        return jsonl;
    }

    /**
     * Every plain photo record of {@code jsonl} is batched, nothing fails to be found or fetched,
     * and the escaping record is one {@code UNSAFE_PATH} dead letter of the parse stage.
     */
    static void assertImageRootOutcome(JobRun.Result run, Path jsonl) throws IOException {
        Map<Long, String> records = readRecords(jsonl);
        Set<Long> batched = run.samplesByIndex().keySet();
        long escapeIndex = records.size() - 1;
        assertThat(records.get(escapeIndex)).isEqualTo(ESCAPING_IMAGE);
        records.forEach(
                (index, images) -> {
                    if (isPlainPhotoRecord("llava-style", images)) {
                        assertThat(batched)
                                .as("plain photo record %d (%s) is written", index, images)
                                .contains(index);
                    }
                });
        assertThat(run.deadLetters())
                .extracting(dl -> dl.get("reason").asText())
                .as("every image is under the image root")
                .doesNotContain("IMAGE_NOT_FOUND", "FETCH_FAILED", "FETCH_TIMEOUT");
        List<JsonNode> escapes =
                run.deadLetters().stream()
                        .filter(dl -> dl.get("sample_index").asLong() == escapeIndex)
                        .toList();
        assertThat(escapes).hasSize(1);
        JsonNode escape = escapes.get(0);
        assertThat(escape.get("reason").asText()).isEqualTo("UNSAFE_PATH");
        assertThat(escape.get("stage").asText()).isEqualTo("parse");
        assertThat(escape.get("record_id").asText()).isEqualTo("escape-1");
        assertThat(escape.get("message").asText())
                .contains("'" + ESCAPING_IMAGE + "'", "escapes the image root");
    }

    static boolean isPlainPhotoRecord(String dataset, String images) {
        if (images.isEmpty()) {
            return false;
        }
        if (dataset.equals("llamafactory-sharegpt")) {
            return true;
        }
        for (String path : images.split(",")) {
            if (!path.startsWith("images/photos/")) {
                return false;
            }
        }
        return true;
    }

    /**
     * Sample index -> comma-joined image paths of each non-blank line (read independently of the
     * job).
     */
    static Map<Long, String> readRecords(Path jsonl) throws IOException {
        Map<Long, String> records = new HashMap<>();
        long index = 0;
        for (String line : Files.readAllLines(jsonl)) {
            if (line.isBlank()) {
                continue;
            }
            List<String> images = new ArrayList<>();
            collectImagePaths(JSON.readTree(line), images);
            records.put(index++, String.join(",", images));
        }
        return records;
    }

    private static final Set<String> IMAGE_KEYS = Set.of("image", "images", "url");

    private static void collectImagePaths(JsonNode node, List<String> out) {
        if (node.isArray()) {
            node.forEach(n -> collectImagePaths(n, out));
            return;
        }
        node.fields()
                .forEachRemaining(
                        e -> {
                            JsonNode v = e.getValue();
                            if (IMAGE_KEYS.contains(e.getKey()) && v.isTextual()) {
                                out.add(v.asText());
                            } else if (IMAGE_KEYS.contains(e.getKey()) && v.isArray()) {
                                v.forEach(p -> out.add(p.asText()));
                            } else if (v.isContainerNode()) {
                                collectImagePaths(v, out);
                            }
                        });
    }
}

package dev.stoker.connectors.source;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.batch.MixtureOrder;
import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.JsonlLine;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;
import java.util.function.Supplier;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.source.reader.RecordsWithSplitIds;
import org.apache.flink.connector.base.source.reader.splitreader.SplitReader;
import org.apache.flink.connector.base.source.reader.splitreader.SplitsAddition;
import org.apache.flink.connector.testutils.source.reader.TestingReaderContext;
import org.apache.flink.connector.testutils.source.reader.TestingReaderOutput;
import org.apache.flink.connector.testutils.source.reader.TestingSplitEnumeratorContext;
import org.apache.flink.core.io.InputStatus;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.testutils.MetricListener;
import org.apache.flink.runtime.metrics.groups.InternalSourceReaderMetricGroup;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link ShuffledJsonlSource}: what fits together, and the generation rule of a restore: within a
 * generation (a failover) the enumerator and readers go on where the checkpoint left them; a new
 * generation (a submission from a savepoint) starts again at its gate's first step and drops the
 * earlier generation's splits.
 */
class ShuffledJsonlSourceTest {
    @TempDir Path dir;

    private static final List<String> NAMES = List.of("captions", "charts");
    private final MixtureOrder order =
            new MixtureOrder(NAMES, new long[] {5, 2}, new long[] {5, 2}, false, 0);

    private ShuffledJsonlSource source(PrefetchGate gate, int captionRecords) throws Exception {
        return new ShuffledJsonlSource(
                List.of(
                        SourceTestData.source(dir, "captions", captionRecords),
                        SourceTestData.source(dir, "charts", 2)),
                order,
                new BatchPlan(7, 2, 2, 3), // 2 steps per epoch, 6 steps
                1024,
                1 << 20,
                gate);
    }

    @Test
    void listingsThatDoNotFitTheOrderAreRefusedNamingTheSource() {
        assertThatThrownBy(() -> source(SourceTestData.unboundedGate("g2", 0), 4))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessage("source 'captions' lists 4 records, the order has 5");
    }

    @Test
    void aFailoverRestoresTheEnumeratorWhereItsCheckpointLeftIt() throws Exception {
        ShuffledJsonlSource source = source(SourceTestData.unboundedGate("g2", 1), 5);
        StepEnumeratorState state = new StepEnumeratorState("g2", 4, new TreeSet<>(List.of(2L)));

        assertThat(nextSteps(source, state)).containsExactly(2L, 4L);
    }

    @Test
    void aNewGenerationStartsAtItsGatesFirstStepWhateverTheSavepointHeld() throws Exception {
        ShuffledJsonlSource source = source(SourceTestData.unboundedGate("g2", 1), 5);
        StepEnumeratorState savepoint =
                new StepEnumeratorState("g1", 4, new TreeSet<>(List.of(2L)));

        assertThat(nextSteps(source, savepoint)).containsExactly(1L, 2L);
    }

    @Test
    void aReaderDropsTheSplitsOfAnEarlierGeneration() throws Exception {
        ShuffledJsonlSource source = source(SourceTestData.unboundedGate("g2", 0), 5);
        TestingReaderContext context = new TestingReaderContext();
        TestingReaderOutput<JsonlLine> output = new TestingReaderOutput<>();
        try (SourceReader<JsonlLine, StepSplit> reader = source.createReader(context)) {
            reader.start();
            reader.addSplits(List.of(new StepSplit("g1", 0, 0), new StepSplit("g2", 1, 2)));
            reader.notifyNoMoreSplits();
            InputStatus status;
            do {
                reader.isAvailable().get();
                status = reader.pollNext(output);
            } while (status != InputStatus.END_OF_INPUT);
        }
        assertThat(output.getEmittedRecords())
                .extracting(l -> l.ref.sampleIndex)
                .as("step 1's slots after the 2 it had emitted; nothing of g1's step 0")
                .containsExactly(6L, 7L);
    }

    /**
     * The split fetchers of one source reader share the JSONL it has read: once every step has been
     * read, a second fetcher reads them all again with the files gone. (Flink closes a fetcher
     * whenever it runs out of splits; each new one read the whole JSONL again.)
     */
    @Test
    void aReadersSplitFetchersShareTheJsonlItHasRead() throws Exception {
        ShuffledJsonlSource source = source(SourceTestData.unboundedGate("g2", 0), 5);
        Supplier<SplitReader<JsonlLine, StepSplit>> fetchers = source.splitReaders();
        List<Object> first = readAllSteps(fetchers.get());
        List<Path> jsonl;
        try (var files = Files.walk(dir)) {
            jsonl = files.filter(f -> f.toString().endsWith(".jsonl")).toList();
        }
        assertThat(jsonl).hasSize(2);
        for (Path file : jsonl) {
            Files.delete(file);
        }

        assertThat(readAllSteps(fetchers.get())).hasSize(24).isEqualTo(first);
    }

    /** Every step's records (source, line, bytes) as one fetcher reads them. */
    private static List<Object> readAllSteps(SplitReader<JsonlLine, StepSplit> fetcher)
            throws Exception {
        List<Object> records = new ArrayList<>();
        for (long step = 0; step < 6; step++) {
            fetcher.handleSplitsChanges(
                    new SplitsAddition<>(List.of(new StepSplit("g2", step, 0))));
            RecordsWithSplitIds<JsonlLine> fetched = fetcher.fetch();
            fetched.nextSplit();
            for (JsonlLine line; (line = fetched.nextRecordFromSplit()) != null; ) {
                records.add(
                        List.of(
                                line.ref.sampleIndex,
                                line.padding,
                                line.padding ? "" : line.ref.source + ":" + line.ref.line,
                                new String(line.bytes, StandardCharsets.UTF_8)));
            }
        }
        return records;
    }

    /**
     * A reader's {@code pendingRecords}: the slots of its splits not yet emitted plus its share of
     * the enumerator's backlog; what it has emitted no longer counts.
     */
    @Test
    void aReaderReportsItsSplitsNotYetEmittedAndItsBacklogShareAsPendingRecords() throws Exception {
        ShuffledJsonlSource source = source(SourceTestData.unboundedGate("g2", 0), 5);
        MetricListener metrics = new MetricListener();
        TestingReaderContext context =
                new TestingReaderContext(
                        new Configuration(),
                        InternalSourceReaderMetricGroup.mock(metrics.getMetricGroup()));
        TestingReaderOutput<JsonlLine> output = new TestingReaderOutput<>();
        try (SourceReader<JsonlLine, StepSplit> reader = source.createReader(context)) {
            assertThat(MetricNames.Source.PENDING_RECORDS)
                    .as("Flink's standard name, which its autoscaler reads")
                    .isEqualTo(org.apache.flink.runtime.metrics.MetricNames.PENDING_RECORDS);
            Gauge<Long> pending =
                    metrics.<Long>getGauge(MetricNames.Source.PENDING_RECORDS).orElseThrow();
            reader.start();
            assertThat(pending.getValue()).isZero();
            // step 0 whole, step 1 with 1 of its 4 slots emitted before a failover
            reader.addSplits(List.of(new StepSplit("g2", 0, 0), new StepSplit("g2", 1, 1)));
            assertThat(pending.getValue()).isEqualTo(7);
            reader.handleSourceEvents(new Backlog(8));
            assertThat(pending.getValue()).isEqualTo(15);
            reader.notifyNoMoreSplits();
            InputStatus status;
            do {
                reader.isAvailable().get();
                status = reader.pollNext(output);
            } while (status != InputStatus.END_OF_INPUT);
            assertThat(output.getEmittedRecords()).hasSize(7);
            assertThat(pending.getValue()).as("the backlog share is left").isEqualTo(8);
        }
    }

    /** The steps a reader is given for two requests after a restore from {@code state}. */
    private static List<Long> nextSteps(ShuffledJsonlSource source, StepEnumeratorState state)
            throws Exception {
        TestingSplitEnumeratorContext<StepSplit> context = new TestingSplitEnumeratorContext<>(1);
        context.registerReader(0, "localhost");
        try (SplitEnumerator<StepSplit, StepEnumeratorState> e =
                source.restoreEnumerator(context, state)) {
            e.start();
            e.handleSplitRequest(0, "localhost");
            e.handleSplitRequest(0, "localhost");
            return context.getSplitAssignments().get(0).getAssignedSplits().stream()
                    .map(s -> s.step)
                    .toList();
        }
    }
}

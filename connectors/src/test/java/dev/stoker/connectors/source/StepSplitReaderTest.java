package dev.stoker.connectors.source;

import static org.assertj.core.api.Assertions.assertThat;

import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.batch.MixtureOrder;
import dev.stoker.operators.model.JsonlLine;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.connector.base.source.reader.RecordsWithSplitIds;
import org.apache.flink.connector.base.source.reader.splitreader.SplitsAddition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link StepSplitReader}: a step's slots in slot order, each the {@link MixtureOrder}'s record for
 * its epoch and position (read back from the source's file here), padding markers past an epoch's
 * records, a restored split going on where it stopped, the lowest step first.
 */
class StepSplitReaderTest {
    @TempDir Path dir;

    private static final List<String> NAMES = List.of("captions", "charts");

    /** Sources of 5 and 2 records, each contributing all per epoch, shuffled with seed 7. */
    private final MixtureOrder order =
            new MixtureOrder(NAMES, new long[] {5, 2}, new long[] {5, 2}, true, 7);

    private StepSplitReader reader(BatchPlan plan) throws IOException {
        List<DatasetListing> listings =
                List.of(
                        SourceTestData.source(dir, "captions", 5),
                        SourceTestData.source(dir, "charts", 2));
        return new StepSplitReader(
                plan, order, new RecordLineReader(NAMES, listings, 1024, 1 << 20));
    }

    @Test
    void aStepsSlotsComeInSlotOrderEachWithTheOrdersRecord() throws IOException {
        BatchPlan plan = new BatchPlan(7, 2, 2, 2); // W=2, B=2: 2 steps per epoch, 2 epochs
        StepSplitReader reader = reader(plan);
        reader.handleSplitsChanges(new SplitsAddition<>(List.of(new StepSplit("g", 2, 0))));

        List<JsonlLine> lines = fetchOne(reader, "step-2");

        assertThat(lines).hasSize(4);
        for (int i = 0; i < 4; i++) {
            long slot = 8 + i; // step 2 = the second epoch's first step
            JsonlLine line = lines.get(i);
            MixtureOrder.Pick pick = order.pick(1, i);
            assertThat(line.padding).isFalse();
            assertThat(line.ref.sampleIndex).isEqualTo(slot);
            assertThat(line.ref.source).isEqualTo(NAMES.get(pick.source));
            assertThat(new String(line.bytes, StandardCharsets.UTF_8))
                    .isEqualTo(SourceTestData.line(NAMES.get(pick.source), pick.record));
            assertThat(line.ref.line).as("1-based line number").isEqualTo(pick.record + 1);
        }
    }

    @Test
    void slotsPastTheEpochsRecordsArePaddingMarkers() throws IOException {
        BatchPlan plan = new BatchPlan(7, 2, 2, 1); // 7 records in 8 slots
        StepSplitReader reader = reader(plan);
        reader.handleSplitsChanges(new SplitsAddition<>(List.of(new StepSplit("g", 1, 0))));

        List<JsonlLine> lines = fetchOne(reader, "step-1");

        assertThat(lines).extracting(l -> l.padding).containsExactly(false, false, false, true);
        assertThat(lines.get(3).ref.sampleIndex).isEqualTo(7);
    }

    @Test
    void aRestoredSplitGoesOnAfterTheSlotsItHadEmitted() throws IOException {
        BatchPlan plan = new BatchPlan(7, 2, 2, 1);
        StepSplitReader reader = reader(plan);
        reader.handleSplitsChanges(new SplitsAddition<>(List.of(new StepSplit("g", 0, 3))));

        List<JsonlLine> lines = fetchOne(reader, "step-0");

        assertThat(lines).extracting(l -> l.ref.sampleIndex).containsExactly(3L);
    }

    @Test
    void theLowestStepHeldIsReadFirstAndNothingHeldReadsNothing() throws IOException {
        BatchPlan plan = new BatchPlan(7, 2, 2, 1);
        StepSplitReader reader = reader(plan);
        reader.handleSplitsChanges(
                new SplitsAddition<>(List.of(new StepSplit("g", 1, 0), new StepSplit("g", 0, 0))));

        assertThat(fetchOne(reader, "step-0")).hasSize(4);
        assertThat(fetchOne(reader, "step-1")).hasSize(4);
        RecordsWithSplitIds<JsonlLine> none = reader.fetch();
        assertThat(none.nextSplit()).isNull();
        assertThat(none.finishedSplits()).isEmpty();
    }

    /** One fetch: it must hold exactly split {@code id}'s records and finish that split. */
    private static List<JsonlLine> fetchOne(StepSplitReader reader, String id) throws IOException {
        RecordsWithSplitIds<JsonlLine> fetched = reader.fetch();
        assertThat(fetched.nextSplit()).isEqualTo(id);
        List<JsonlLine> lines = new ArrayList<>();
        for (JsonlLine l = fetched.nextRecordFromSplit();
                l != null;
                l = fetched.nextRecordFromSplit()) {
            lines.add(l);
        }
        assertThat(fetched.nextSplit()).isNull();
        assertThat(fetched.finishedSplits()).containsExactly(id);
        return lines;
    }
}

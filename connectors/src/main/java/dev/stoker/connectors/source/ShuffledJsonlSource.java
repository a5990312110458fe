package dev.stoker.connectors.source;

import dev.stoker.operators.batch.BatchPlan;
import dev.stoker.operators.batch.MixtureOrder;
import dev.stoker.operators.model.JsonlLine;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Supplier;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceEvent;
import org.apache.flink.api.connector.source.SourceOutput;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.api.java.typeutils.ResultTypeQueryable;
import org.apache.flink.connector.base.source.reader.RecordEmitter;
import org.apache.flink.connector.base.source.reader.SingleThreadMultiplexSourceReaderBase;
import org.apache.flink.connector.base.source.reader.splitreader.SplitReader;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * The bounded JSONL source in the run's deterministic sample order: epoch after epoch, each the
 * {@link MixtureOrder} over the sources' records (each source a {@link DatasetListing}), cut into
 * one {@link StepSplit} per global step of the {@link BatchPlan}.
 *
 * <p>Emits one {@link JsonlLine} per record whose {@code ref.sampleIndex} is the record's slot
 * index in the plan and whose {@code ref.source} is its source's name, so (step, rank, slot) of
 * every sample is fixed by (listings, per-source counts, seed, epoch, plan) and not by parallelism
 * or timing. Delivery: each record of steps {@code firstStep ..} exactly once per generation with
 * Flink checkpointing (the enumerator's position and each reader's progress within its step are
 * checkpointed). A restore into a new generation (a new submission from a savepoint) starts again
 * at the gate's first step. Steps are handed to the readers only as far as the {@link PrefetchGate}
 * allows (the enumerator enforces it).
 */
public final class ShuffledJsonlSource
        implements Source<JsonlLine, StepSplit, StepEnumeratorState>,
                ResultTypeQueryable<JsonlLine> {
    private static final long serialVersionUID = 1L;

    private final List<DatasetListing> listings;
    private final MixtureOrder order;
    private final BatchPlan plan;
    private final int maxLineBytes;
    private final long fileCacheBytes;
    private final PrefetchGate gate;

    /**
     * @param listings each source's listing, in the order of {@code order}'s sources
     * @param order which record of which source fills each position of an epoch
     * @param plan the slots: {@code plan.numRecords()} is {@code order.recordsPerEpoch()}
     * @param maxLineBytes longest record read in full; longer ones are cut and rejected downstream
     * @param fileCacheBytes bytes of whole JSONL files each reader keeps in memory
     * @param gate the prefetch bound, which also fixes the generation and its first step
     * @throws IllegalArgumentException if the listings, order and plan do not fit together
     */
    public ShuffledJsonlSource(
            List<DatasetListing> listings,
            MixtureOrder order,
            BatchPlan plan,
            int maxLineBytes,
            long fileCacheBytes,
            PrefetchGate gate) {
        if (listings.size() != order.numSources() || plan.numRecords() != order.recordsPerEpoch()) {
            throw new IllegalArgumentException(
                    listings.size()
                            + " listings and a plan of "
                            + plan.numRecords()
                            + " records per epoch do not fit an order of "
                            + order.numSources()
                            + " sources and "
                            + order.recordsPerEpoch()
                            + " records per epoch");
        }
        for (int s = 0; s < listings.size(); s++) {
            if (listings.get(s).numRecords() != order.records(s)) {
                throw new IllegalArgumentException(
                        "source '"
                                + order.name(s)
                                + "' lists "
                                + listings.get(s).numRecords()
                                + " records, the order has "
                                + order.records(s));
            }
        }
        this.listings = List.copyOf(listings);
        this.order = order;
        this.plan = plan;
        this.maxLineBytes = maxLineBytes;
        this.fileCacheBytes = fileCacheBytes;
        this.gate = gate;
    }

    @Override
    public Boundedness getBoundedness() {
        return Boundedness.BOUNDED;
    }

    @Override
    public SplitEnumerator<StepSplit, StepEnumeratorState> createEnumerator(
            SplitEnumeratorContext<StepSplit> context) {
        return new StepEnumerator(
                context,
                gate,
                gate.firstStep(),
                plan.numSteps(),
                plan.globalBatchSize(),
                new TreeSet<>());
    }

    @Override
    public SplitEnumerator<StepSplit, StepEnumeratorState> restoreEnumerator(
            SplitEnumeratorContext<StepSplit> context, StepEnumeratorState state) {
        if (!state.generation.equals(gate.generation())) {
            // A new submission restored from a savepoint: start at this generation's first step.
            return createEnumerator(context);
        }
        return new StepEnumerator(
                context,
                gate,
                state.nextStep,
                plan.numSteps(),
                plan.globalBatchSize(),
                state.returnedSteps);
    }

    @Override
    public SimpleVersionedSerializer<StepSplit> getSplitSerializer() {
        return StepSplitSerializer.INSTANCE;
    }

    @Override
    public SimpleVersionedSerializer<StepEnumeratorState> getEnumeratorCheckpointSerializer() {
        return StepEnumeratorState.Serializer.INSTANCE;
    }

    @Override
    public SourceReader<JsonlLine, StepSplit> createReader(SourceReaderContext context) {
        return new Reader(splitReaders(), context, gate.generation(), plan.globalBatchSize());
    }

    /**
     * The split readers of one source reader: Flink creates one per split fetcher, and closes a
     * fetcher whenever it has run out of splits (about every other step), so all share one {@link
     * RecordLineReader} and its file and index caches; with one each, every new fetcher read the
     * whole JSONL again (a HEAD and a GET on S3; 14 of 80 steps, bench/results/profile.md).
     */
    Supplier<SplitReader<JsonlLine, StepSplit>> splitReaders() {
        RecordLineReader lines =
                new RecordLineReader(names(), listings, maxLineBytes, fileCacheBytes);
        return () -> new StepSplitReader(plan, order, lines);
    }

    private List<String> names() {
        List<String> names = new ArrayList<>();
        for (int s = 0; s < order.numSources(); s++) {
            names.add(order.name(s));
        }
        return names;
    }

    @Override
    public TypeInformation<JsonlLine> getProducedType() {
        return TypeInformation.of(JsonlLine.class);
    }

    /** Progress within a split: slots of the step already emitted. */
    static final class SplitProgress {
        final String generation;
        final long step;

        /** Written by the task thread only; read by the {@code pendingRecords} gauge too. */
        volatile int elementsEmitted;

        SplitProgress(StepSplit split) {
            this.generation = split.generation;
            this.step = split.step;
            this.elementsEmitted = split.elementsEmitted;
        }
    }

    /**
     * Reads the splits the enumerator hands it, {@link StepEnumerator#SPLITS_HELD} at a time, and
     * reports as {@code pendingRecords} (FLIP-33) the records of its splits not yet emitted plus
     * its {@link Backlog} share of the allowed steps no reader holds yet.
     */
    private static final class Reader
            extends SingleThreadMultiplexSourceReaderBase<
                    JsonlLine, JsonlLine, StepSplit, SplitProgress> {
        private final String generation;
        private final long recordsPerStep;

        /** The splits held, by split id (the task thread adds and removes them). */
        private final Map<String, SplitProgress> held = new ConcurrentHashMap<>();

        /** The last {@link Backlog} share from the enumerator. */
        private volatile long backlogShare;

        Reader(
                Supplier<SplitReader<JsonlLine, StepSplit>> splitReader,
                SourceReaderContext context,
                String generation,
                long recordsPerStep) {
            super(splitReader, new Emitter(), context.getConfiguration(), context);
            this.generation = generation;
            this.recordsPerStep = recordsPerStep;
            context.metricGroup().setPendingRecordsGauge(this::pendingRecords);
        }

        private long pendingRecords() {
            long records = backlogShare;
            for (SplitProgress split : held.values()) {
                records += recordsPerStep - split.elementsEmitted;
            }
            return records;
        }

        @Override
        public void handleSourceEvents(SourceEvent event) {
            if (event instanceof Backlog backlog) {
                backlogShare = backlog.records;
            }
        }

        @Override
        public void addSplits(List<StepSplit> splits) {
            // Splits restored from a savepoint of an earlier generation are dropped: this
            // generation's enumerator hands out every step from its first step again.
            super.addSplits(splits.stream().filter(s -> s.generation.equals(generation)).toList());
        }

        @Override
        public void start() {
            // a restored reader holds the splits it was given back and tops them up
            for (int i = getNumberOfCurrentlyAssignedSplits();
                    i < StepEnumerator.SPLITS_HELD;
                    i++) {
                context.sendSplitRequest();
            }
        }

        @Override
        protected void onSplitFinished(Map<String, SplitProgress> finished) {
            held.keySet().removeAll(finished.keySet());
            context.sendSplitRequest();
        }

        @Override
        protected SplitProgress initializedState(StepSplit split) {
            SplitProgress progress = new SplitProgress(split);
            held.put(split.splitId(), progress);
            return progress;
        }

        @Override
        protected StepSplit toSplitType(String splitId, SplitProgress progress) {
            return new StepSplit(progress.generation, progress.step, progress.elementsEmitted);
        }
    }

    private static final class Emitter
            implements RecordEmitter<JsonlLine, JsonlLine, SplitProgress> {
        @Override
        public void emitRecord(
                JsonlLine line, SourceOutput<JsonlLine> output, SplitProgress state) {
            output.collect(line);
            state.elementsEmitted++;
        }
    }
}

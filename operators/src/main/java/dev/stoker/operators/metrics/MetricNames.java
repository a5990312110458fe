package dev.stoker.operators.metrics;

/**
 * The names of the Flink metrics Stoker's operators register, declared once: the operators and
 * sinks register them through these constants, the operator guide's "Watch" table
 * (docs/operator-guide.md) names their REST ids, {@code MetricsReferenceTest} checks that every id
 * there is made of these names, and the tests that read metrics over the REST API (S3JobITCase,
 * python/tests test_cluster_job_reuse) read the ids from that table.
 *
 * <p>A metric's REST id is its operator's name, a dot (the sink: {@code arrow-shm-sink__Writer.}),
 * then its groups and its name joined by dots, e.g. {@code fetch-images.s3.getLatencyMs_p99}. The
 * per-epoch accounting counts (also accumulators) are named in {@link
 * dev.stoker.operators.accounting.Accounting}.
 *
 * <p>Kept in the operators module, below the connectors, because every layer registers metrics and
 * the names are one contract with the docs and the tests, like the batch protocol's fields.
 */
public final class MetricNames {
    private MetricNames() {}

    /**
     * The source: its split enumerator (the prefetch gate) and its readers, on the source vertex.
     */
    public static final class Source {
        /** Gauge: the last step the source may read (the prefetch gate, stoker.prefetch-depth). */
        public static final String PREFETCH_ALLOWED_STEP = "prefetchAllowedStep";

        /** Gauge: the last step every trainer rank acknowledged (first step - 1 before any). */
        public static final String ACKED_STEP = "ackedStep";

        /**
         * Gauge per reader: records of the steps the prefetch gate allows that the reader has not
         * emitted, with its share of those no reader holds yet. Flink's standard (FLIP-33) name,
         * registered through {@code SourceReaderMetricGroup#setPendingRecordsGauge}.
         */
        public static final String PENDING_RECORDS = "pendingRecords";

        private Source() {}
    }

    /**
     * The image and video fetch ({@code fetch-images}): both stores, then per store a group (the S3
     * group counts both kinds).
     */
    public static final class Fetch {
        /** Counter: images fetched (local files or S3 objects). */
        public static final String IMAGES_FETCHED = "imagesFetched";

        /** Counter: bytes of the images fetched, in bytes. */
        public static final String IMAGE_BYTES_FETCHED = "imageBytesFetched";

        /** Counter: videos fetched (local files or S3 objects). */
        public static final String VIDEOS_FETCHED = "videosFetched";

        /** Counter: bytes of the videos fetched, in bytes. */
        public static final String VIDEO_BYTES_FETCHED = "videoBytesFetched";

        /** Group of the local-filesystem store's metrics. */
        public static final String FS_GROUP = "fs";

        /** Histogram (last 10,000): one local image read, in milliseconds. */
        public static final String READ_LATENCY_MS = "readLatencyMs";

        /** Group of the S3 store's metrics. */
        public static final String S3_GROUP = "s3";

        /** Gauge: S3 requests (GETs, hedged GETs, HEADs) on the wire now. */
        public static final String REQUESTS_IN_FLIGHT = "requestsInFlight";

        /** Gauge: GETs queued for one of {@code stoker.s3.max-connections} connections. */
        public static final String GETS_WAITING_FOR_CONNECTION = "getsWaitingForConnection";

        /** Histogram (last 10,000): one S3 GET with its retries, in milliseconds. */
        public static final String GET_LATENCY_MS = "getLatencyMs";

        /** Counter: bytes received from S3, in bytes. */
        public static final String BYTES_FETCHED = "bytesFetched";

        /** Meter: bytes received from S3 per second. */
        public static final String BYTES_PER_SECOND = "bytesPerSecond";

        /** Counter: HTTP attempts after a request's first one. */
        public static final String RETRIES = "retries";

        /** Counter: transient failures (throttling, 5xx, I/O errors, attempt timeouts). */
        public static final String TRANSIENT_FAILURES = "transientFailures";

        /** Counter: second GETs sent for slow ones ({@code stoker.s3.hedge-after}). */
        public static final String HEDGED_GETS = "hedgedGets";

        /** Group of the failed-fetch counters, one per dead-letter reason of the fetch stage. */
        public static final String FAILURES_GROUP = "failures";

        private Fetch() {}
    }

    /** The image and video preprocessing ({@code preprocess-images}). */
    public static final class Preprocess {
        /** Counter: images decoded, resized, normalised and patchified. */
        public static final String IMAGES_PREPROCESSED = "imagesPreprocessed";

        /** Counter: images rejected (their record goes to the dead letters). */
        public static final String IMAGES_REJECTED = "imagesRejected";

        /** Counter: time spent preprocessing images, in nanoseconds. */
        public static final String IMAGE_PREPROCESS_NANOS = "imagePreprocessNanos";

        /** Counter: megapixels of model input produced (patches x patch_size^2), in megapixels. */
        public static final String IMAGE_MEGAPIXELS = "imageMegapixels";

        /** Gauge: decode + resize time per megapixel of model input, in ms (-1 before any). */
        public static final String PREPROCESS_MS_PER_MEGAPIXEL = "preprocessMsPerMegapixel";

        /** Counter: videos decoded, sampled and resized. */
        public static final String VIDEOS_PREPROCESSED = "videosPreprocessed";

        /** Counter: videos rejected (their record goes to the dead letters). */
        public static final String VIDEOS_REJECTED = "videosRejected";

        /** Counter: time spent decoding, sampling and resizing videos, in nanoseconds. */
        public static final String VIDEO_PREPROCESS_NANOS = "videoPreprocessNanos";

        /** Counter: frames sampled from the videos preprocessed. */
        public static final String VIDEO_FRAMES_SAMPLED = "videoFramesSampled";

        /** Gauge: 1 when libjpeg-turbo decodes JPEGs, 0 when ImageIO does. */
        public static final String JPEG_DECODER_NATIVE = "jpegDecoderNative";

        /** Gauge: 1 when libwebp decodes WebP, 0 when TwelveMonkeys' reader does. */
        public static final String WEBP_DECODER_NATIVE = "webpDecoderNative";

        private Preprocess() {}
    }

    /** Sequence packing ({@code pack-steps}). */
    public static final class Pack {
        /** Counter: steps packed into rows. */
        public static final String STEPS_PACKED = "stepsPacked";

        /** Counter: samples placed into packed rows. */
        public static final String SAMPLES_PACKED = "samplesPacked";

        /** Gauge: padding tokens / all token positions of the batches packed so far (0..1). */
        public static final String PACKING_PADDING_RATIO = "packingPaddingRatio";

        /** Gauge: mean real tokens per packed row so far. */
        public static final String PACKED_TOKENS_PER_ROW = "packedTokensPerRow";

        /**
         * Gauge: the last step's busiest rank's tokens over the ranks' mean, minus 1 (0 = even).
         */
        public static final String RANK_TOKEN_IMBALANCE = "rankTokenImbalance";

        /** Gauge: the same for vision patches, images and videos (0 = even). */
        public static final String RANK_PATCH_IMBALANCE = "rankPatchImbalance";

        private Pack() {}
    }

    /** The dead-letter accounting ({@code dead-letter-accounting}). */
    public static final class DeadLetters {
        /** Group of the dead-letter counters by reason ({@code deadLettersByReason.<REASON>}). */
        public static final String BY_REASON_GROUP = "deadLettersByReason";

        private DeadLetters() {}
    }

    /**
     * The shared-memory sink ({@code arrow-shm-sink}, REST prefix {@code arrow-shm-sink__Writer}).
     */
    public static final class Sink {
        /** Counter: slots of batches staged by this writer. */
        public static final String SLOTS_STAGED = "slotsStaged";

        /** Counter: slots skipped because the trainer had already consumed their step. */
        public static final String SLOTS_SKIPPED_ALREADY_CONSUMED = "slotsSkippedAlreadyConsumed";

        /** Counter (packed sink): batches skipped because the trainer had already consumed them. */
        public static final String BATCHES_SKIPPED_ALREADY_CONSUMED =
                "batchesSkippedAlreadyConsumed";

        /** Counter: bytes of the batch files published, in bytes. */
        public static final String BATCH_BYTES_WRITTEN = "batchBytesWritten";

        /** Group of a rank's metrics: {@code rank.<r>.<name>}. */
        public static final String RANK_GROUP = "rank";

        /** Gauge: batches published for the rank and not yet consumed (counted on disk). */
        public static final String BATCHES_AHEAD = "batchesAhead";

        /** Counter: batches published for the rank. */
        public static final String BATCHES_WRITTEN = "batchesWritten";

        /** Gauge: the rank trainer's data-wait time / step time, from its {@code ack.json}. */
        public static final String TRAINER_WAIT_TIME_RATIO = "trainerWaitTimeRatio";

        /** Gauge: the last step the rank's trainer acknowledged. */
        public static final String TRAINER_CONSUMED_STEP = "trainerConsumedStep";

        private Sink() {}
    }
}

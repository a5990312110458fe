package dev.stoker.job;

import dev.stoker.connectors.fetch.TransientFailurePolicy;
import dev.stoker.connectors.protocol.PixelDtype;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.preset.ModelPreset;
import dev.stoker.operators.tokenize.SequenceLengthPolicy;
import dev.stoker.operators.video.VideoPreprocessor;
import java.time.Duration;
import java.util.List;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.MemorySize;

/**
 * All of Stoker's job options. Set them like any Flink option: in {@code config.yaml}, with {@code
 * -D key=value}, or as {@code --key value} program arguments. They appear in the web UI's job
 * configuration.
 */
public final class StokerOptions {
    private StokerOptions() {}

    public static final ConfigOption<String> DATASET_PATH =
            ConfigOptions.key("stoker.dataset.path")
                    .stringType()
                    .noDefaultValue()
                    .withDescription(
                            "Dataset root of a one-dataset run (several datasets: stoker.mixture.path; set"
                                    + " exactly one of the two): a local directory, any Flink filesystem URI, or"
                                    + " s3://bucket/prefix (listed and read through Flink's S3 filesystem"
                                    + " plugin). The JSONL files"
                                    + " under it (stoker.dataset.glob) are read as UTF-8 (byte order marks and"
                                    + " other encodings: docs/data-guide.md); image paths in records resolve"
                                    + " relative to it unless stoker.image.root is set. A relative local path is"
                                    + " made absolute against the working directory of flink run.");

    public static final ConfigOption<String> MIXTURE_PATH =
            ConfigOptions.key("stoker.mixture.path")
                    .stringType()
                    .noDefaultValue()
                    .withDescription(
                            "A mixture spec (YAML; a local path or any Flink filesystem URI such as"
                                    + " s3://bucket/mixtures/stage1.yaml) blending several datasets: each source"
                                    + " has a name, a path (relative paths resolve against the spec's directory)"
                                    + " and glob, a weight, repeat or count per epoch, and optional overrides of"
                                    + " image_root, system_prompt, min_pixels, max_pixels and max_seq_len, and"
                                    + " its record format."
                                    + " Exactly one of stoker.mixture.path and stoker.dataset.path is set (the"
                                    + " latter is the one-source mixture named 'dataset'). A bad spec stops the"
                                    + " job at start-up naming the source and field. Format and semantics:"
                                    + " docs/data-guide.md#mixtures.");

    public static final ConfigOption<Long> MIXTURE_START_STEP =
            ConfigOptions.key("stoker.mixture.start-step")
                    .longType()
                    .defaultValue(0L)
                    .withDescription(
                            "The step at which this mixture (stoker.mixture.path or stoker.dataset.path)"
                                    + " starts: its plan's epochs count from here, after the steps an earlier"
                                    + " stage's mixture produced (the next curriculum stage). 0: the run's"
                                    + " first mixture. Changing the mixture at a resume needs it: resubmit"
                                    + " without the previous stage's savepoint (its records in flight are the"
                                    + " old mixture's) with the new spec, this option and stoker.resume-step"
                                    + " start-step - 1; a later resume of the stage (from its own"
                                    + " savepoints) passes the same value or leaves it out (the job then"
                                    + " continues the stage the job directory's plan_history names for the"
                                    + " same spec, world size and micro-batch size). A resume that changes"
                                    + " stoker.dp-world-size or stoker.micro-batch-size starts a stage"
                                    + " here by itself (see stoker.mixture.start-position). The manifest"
                                    + " records it (mixture_start_step) and the stages so far"
                                    + " (plan_history), and a trainer's data state from the previous stage"
                                    + " is accepted only at exactly this step."
                                    + " docs/data-guide.md#changing-the-mixture-at-a-resume.");

    public static final ConfigOption<Long> MIXTURE_START_POSITION =
            ConfigOptions.key("stoker.mixture.start-position")
                    .longType()
                    .defaultValue(0L)
                    .withDescription(
                            "The records of the mixture's sample order (numbered across epochs:"
                                    + " epoch x records per epoch + position) that came before"
                                    + " stoker.mixture.start-step: the stage starts there instead of at"
                                    + " epoch 0. 0: a new mixture. A resume that changes"
                                    + " stoker.dp-world-size or stoker.micro-batch-size (with"
                                    + " stoker.resume-step S, without the savepoint) works it out from the"
                                    + " job directory's plan_history (the records the trainer consumed"
                                    + " through step S) and starts a stage at S + 1; set it (python -m"
                                    + " stoker.resume does, from the trainer's data state) to resume where"
                                    + " that history is gone, or to continue such a stage. The manifest"
                                    + " records it (mixture_start_position)."
                                    + " docs/data-guide.md#another-world-size-or-micro-batch-size-at-a-resume.");

    public static final ConfigOption<String> IMAGE_ROOT =
            ConfigOptions.key("stoker.image.root")
                    .stringType()
                    .noDefaultValue()
                    .withDescription(
                            "Root the image paths in records resolve against: a local directory, any Flink"
                                    + " filesystem URI, or s3://bucket/prefix (fetched with the S3 client"
                                    + " of the stoker.s3.* options, whatever the dataset's scheme)."
                                    + " Default: the dataset root. A path that leaves it (absolute, a URL"
                                    + " scheme, a backslash, '..' above it, a symbolic link out of it) is"
                                    + " dead-lettered UNSAFE_PATH before any request. Paths are used as written"
                                    + " (no Unicode normalization: NFC and NFD spellings are different names)."
                                    + " Checked at start-up, where an invalid URI, an s3:// without a bucket or a"
                                    + " local root that is not an existing directory stops the job with a message"
                                    + " naming the option and value. A local root must exist at the same path on"
                                    + " every TaskManager.");

    public static final ConfigOption<String> DATASET_GLOB =
            ConfigOptions.key("stoker.dataset.glob")
                    .stringType()
                    .defaultValue("*.jsonl")
                    .withDescription(
                            "Which files under the dataset root are JSONL: a glob (Java PathMatcher syntax:"
                                    + " *, ?, [...], {a,b}) matched against each file's name, not its path, in"
                                    + " every directory under the root (e.g. train-*.jsonl, *.{jsonl,json}). The"
                                    + " matching files are read sorted by path and are part of the dataset"
                                    + " fingerprint. None matching stops the job at start-up, naming the glob.");

    public static final ConfigOption<String> TOKENIZER_PATH =
            ConfigOptions.key("stoker.tokenizer.path")
                    .stringType()
                    .noDefaultValue()
                    .withDescription(
                            "Directory holding the model's Hugging Face tokenizer.json (read on every"
                                    + " TaskManager; never fetched from a hub). It must load when the job is"
                                    + " submitted; a relative path is made absolute against the working"
                                    + " directory of flink run. ./stoker demo puts Qwen's in"
                                    + " .stoker/tokenizers/qwen3/.");

    public static final ConfigOption<String> JOB_NAME =
            ConfigOptions.key("stoker.job-name")
                    .stringType()
                    .defaultValue("stoker")
                    .withDescription(
                            "Name of the job; also the name of its batch directory under the output root.");

    public static final ConfigOption<String> OUTPUT_ROOT =
            ConfigOptions.key("stoker.output.root")
                    .stringType()
                    .defaultValue("/dev/shm/stoker")
                    .withDescription(
                            "Node-local directory the sink writes batches under, as"
                                    + " <root>/<job-name>/gen-<stamp>/rank-<r>/ (a new generation per"
                                    + " submission, named in <root>/<job-name>/manifest.json;"
                                    + " docs/batch-protocol.md). A local path (file: URIs only).");

    public static final ConfigOption<PixelDtype> PIXEL_DTYPE =
            ConfigOptions.key("stoker.image.pixel-dtype")
                    .enumType(PixelDtype.class)
                    .defaultValue(PixelDtype.FLOAT32)
                    .withDescription(
                            "Element type of pixel_values in the batch files: FLOAT32 (the sink normalises;"
                                    + " the default, for CPU trainers),"
                                    + " BFLOAT16 (half the bytes; each float32 rounded to nearest even, stored as"
                                    + " uint16 bits with metadata stoker.pixel_dtype=bfloat16, which the Python"
                                    + " reader returns as torch.bfloat16), or UINT8 (a quarter of the bytes: the"
                                    + " resized RGB samples in the same patch rows, not normalised, metadata"
                                    + " stoker.pixel_dtype=uint8; the Python reader's to_torch(device) and"
                                    + " StokerDataset(device=...) normalise them on the trainer's device to the"
                                    + " FLOAT32 values bit for bit, or to BFLOAT16's with"
                                    + " pixel_dtype=torch.bfloat16; the value for GPU trainers, which the Kubernetes"
                                    + " layout sets: half the sink's CPU per batch, 3.6x smaller batch files;"
                                    + " docs/trainer-guide.md).");

    public static final ConfigOption<Boolean> PACKING_ENABLED =
            ConfigOptions.key("stoker.packing.enabled")
                    .booleanType()
                    .defaultValue(false)
                    .withDescription(
                            "Pack each step's samples into rows of at most stoker.packing.max-tokens tokens"
                                    + " (no sample split) and spread them over the DP ranks by tokens (any two"
                                    + " ranks differ by at most one sample's tokens), so ranks get equal work and"
                                    + " rows little padding. A packed batch carries each"
                                    + " sample's own M-RoPE position_ids and cu_seqlens; its attention_mask must not"
                                    + " reach the model and the model's cache must be off (the reader's to_torch()"
                                    + " leaves the mask out and sets use_cache=False). The step's W*B"
                                    + " samples stay those of the plan; how many each rank gets varies"
                                    + " (docs/batch-protocol.md, 'Packed batches').");

    public static final ConfigOption<Integer> PACKING_MAX_TOKENS =
            ConfigOptions.key("stoker.packing.max-tokens")
                    .intType()
                    .noDefaultValue()
                    .withDescription(
                            "Tokens per packed row, images' tokens included (default: stoker.max-seq-len,"
                                    + " the longest a sample may be). Must be at least stoker.max-seq-len, so"
                                    + " every sample fits a row.");

    public static final ConfigOption<String> DEAD_LETTER_PATH =
            ConfigOptions.key("stoker.dead-letter.path")
                    .stringType()
                    .noDefaultValue()
                    .withDescription(
                            "Directory for the dead-letter JSONL output. Default: <output-root>/<job-name>/dead-letters.");

    public static final ConfigOption<Integer> DP_WORLD_SIZE =
            ConfigOptions.key("stoker.dp-world-size")
                    .intType()
                    .defaultValue(1)
                    .withDescription("Number of data-parallel (DP) ranks of the trainer.");

    public static final ConfigOption<Integer> MICRO_BATCH_SIZE =
            ConfigOptions.key("stoker.micro-batch-size")
                    .intType()
                    .defaultValue(4)
                    .withDescription(
                            "Samples per rank per step; the global batch is dp-world-size x micro-batch-size.");

    public static final ConfigOption<Integer> EPOCHS =
            ConfigOptions.key("stoker.epochs")
                    .intType()
                    .defaultValue(1)
                    .withDescription(
                            "Passes over the dataset; steps count on across epochs and each epoch has its own shuffle.");

    public static final ConfigOption<Boolean> SHUFFLE =
            ConfigOptions.key("stoker.shuffle")
                    .booleanType()
                    .defaultValue(true)
                    .withDescription(
                            "Shuffle the records of each epoch over the whole dataset (seeded, deterministic);"
                                    + " false keeps the listing order (files by path, lines in order).");

    public static final ConfigOption<Long> SHUFFLE_SEED =
            ConfigOptions.key("stoker.shuffle.seed")
                    .longType()
                    .defaultValue(0L)
                    .withDescription(
                            "Seed of the per-epoch shuffle; batch (step, rank) is a pure function of"
                                    + " (dataset, seed, epoch, world size, micro-batch size).");

    public static final ConfigOption<Integer> PREFETCH_DEPTH =
            ConfigOptions.key("stoker.prefetch-depth")
                    .intType()
                    .defaultValue(8)
                    .withDescription(
                            "Batches each rank may have written but not yet consumed; beyond that the source"
                                    + " waits for the trainer's acks (Flink backpressure, checkpoints keep"
                                    + " completing). The steps still in the pipeline count too, so the"
                                    + " depth must cover the time a step spends in the job (fetch latency"
                                    + " plus B samples' preprocessing on one subtask) at the trainer's step"
                                    + " time, or the pipeline runs dry. To hide failures from the trainers it"
                                    + " must also outlast the job's recovery: at least (L + 20 s) / step time"
                                    + " to hide a node lost for L seconds (docs/operator-guide.md, Failures and"
                                    + " recovery). Memory: up to this many batch files per rank in /dev/shm."
                                    + " 0 = unbounded (no trainer feedback).");

    public static final ConfigOption<Long> RESUME_STEP =
            ConfigOptions.key("stoker.resume-step")
                    .longType()
                    .noDefaultValue()
                    .withDescription(
                            "Last step the trainer consumed before it restarted (its checkpoint's step);"
                                    + " the job produces steps resume-step + 1 onwards. Unset: when restoring"
                                    + " from a savepoint, the last step every rank acknowledged in the previous"
                                    + " run's shared memory; otherwise -1 (start at step 0).");

    public static final ConfigOption<String> INDEX_CACHE =
            ConfigOptions.key("stoker.source.index-cache")
                    .stringType()
                    .defaultValue(
                            java.nio.file.Path.of(
                                            System.getProperty("java.io.tmpdir"),
                                            "stoker-record-index")
                                    .toString())
                    .withDescription(
                            "Where each JSONL file's record index (where its records start, 16 bytes per"
                                    + " record) is kept once built: a local directory or any Flink filesystem"
                                    + " URI. Planning reads every file once to build its index and then only"
                                    + " the index's header while the file's size and modification time are"
                                    + " unchanged; the source loads indexes from here as it reads (a"
                                    + " TaskManager that finds none rebuilds it from the file). A shared"
                                    + " location such as s3://bucket/stoker-index lets every TaskManager reuse"
                                    + " the client's. Default: stoker-record-index in the JVM's temporary"
                                    + " directory.");

    public static final ConfigOption<Integer> LISTING_THREADS =
            ConfigOptions.key("stoker.source.listing-threads")
                    .intType()
                    .defaultValue(8)
                    .withDescription(
                            "JSONL files indexed at once while the job is planned (each read once per"
                                    + " version, see stoker.source.index-cache). Progress is logged every 10"
                                    + " seconds.");

    public static final ConfigOption<MemorySize> FILE_CACHE_SIZE =
            ConfigOptions.key("stoker.source.file-cache-size")
                    .memoryType()
                    .defaultValue(MemorySize.ofMebiBytes(256))
                    .withDescription(
                            "Bytes of whole JSONL files each source reader keeps in memory for shuffled reads;"
                                    + " records of larger files are read by seeking (a ranged GET on S3). The"
                                    + " reader keeps up to as many bytes again of the files' record indexes (16"
                                    + " bytes per record).");

    public static final ConfigOption<Integer> FETCH_CAPACITY =
            ConfigOptions.key("stoker.fetch.capacity")
                    .intType()
                    .defaultValue(32)
                    .withDescription(
                            "Maximum records with image fetches in flight per fetch subtask (async capacity)."
                                    + " Their GETs on s3:// image roots share stoker.s3.max-connections.");

    public static final ConfigOption<Integer> FETCH_THREADS =
            ConfigOptions.key("stoker.fetch.threads")
                    .intType()
                    .defaultValue(8)
                    .withDescription(
                            "I/O threads per fetch subtask reading image objects from local/Flink filesystems"
                                    + " (s3:// datasets use the non-blocking S3 client instead).");

    public static final ConfigOption<Duration> FETCH_TIMEOUT =
            ConfigOptions.key("stoker.fetch.timeout")
                    .durationType()
                    .defaultValue(Duration.ofSeconds(60))
                    .withDescription(
                            "Time after which a record's image and video fetch is abandoned and"
                                    + " dead-lettered.");

    public static final ConfigOption<TransientFailurePolicy> FETCH_TRANSIENT_FAILURES =
            ConfigOptions.key("stoker.fetch.transient-failures")
                    .enumType(TransientFailurePolicy.class)
                    .defaultValue(TransientFailurePolicy.DEAD_LETTER)
                    .withDescription(
                            "What an s3:// image GET that still fails after the client's retries (5xx, throttling,"
                                    + " timeouts, resets) or exceeds stoker.fetch.timeout becomes: DEAD_LETTER (the"
                                    + " slot is back-filled, the job never restarts) or FAIL_OVER (the task fails and"
                                    + " the job retries from its last checkpoint, so batches stay deterministic)."
                                    + " Counted either way in the fetch operator's s3.transientFailures.");

    public static final ConfigOption<MemorySize> MAX_OBJECT_SIZE =
            ConfigOptions.key("stoker.fetch.max-object-size")
                    .memoryType()
                    .defaultValue(MemorySize.ofMebiBytes(64))
                    .withDescription(
                            "Largest image object accepted; a larger one is dead-lettered IMAGE_TOO_LARGE,"
                                    + " from its size before reading (files) or after at most this many bytes"
                                    + " (an s3:// GET asks for the range bytes=0-<this>).");

    public static final ConfigOption<MemorySize> MAX_LINE_LENGTH =
            ConfigOptions.key("stoker.source.max-line-length")
                    .memoryType()
                    .defaultValue(MemorySize.ofMebiBytes(8))
                    .withDescription(
                            "Longest JSONL line accepted; a longer record is dead-lettered LINE_TOO_LONG"
                                    + " (\"record larger than <limit>\") while only that much of it is read.");

    // ---- Model preset and its overrides (see ModelOptions and docs/parity.md) ----

    public static final ConfigOption<String> MODEL_PRESET =
            ConfigOptions.key("stoker.model.preset")
                    .stringType()
                    .defaultValue(ModelPreset.DEFAULT.key())
                    .withDescription(
                            "Model whose Hugging Face preprocessing the job reproduces: "
                                    + ModelPreset.keys()
                                    + ". Sets patch size, temporal patch size, merge size (resize factor ="
                                    + " patch x merge), min/max pixels, image mean/std and the chat template"
                                    + " (qwen2-vl and qwen2.5-vl insert the default system prompt 'You are a"
                                    + " helpful assistant.', qwen3-vl none). Each stoker.image.*,"
                                    + " stoker.video.* and stoker.template.* option, and stoker.max-seq-len,"
                                    + " overrides its preset value (values and their sources: docs/parity.md).");

    public static final ConfigOption<Integer> PATCH_SIZE =
            ConfigOptions.key("stoker.image.patch-size")
                    .intType()
                    .noDefaultValue()
                    .withDescription(
                            "Vision patch side in pixels (preset: 14 for Qwen2/2.5-VL, 16 for Qwen3-VL).");

    public static final ConfigOption<Integer> TEMPORAL_PATCH_SIZE =
            ConfigOptions.key("stoker.image.temporal-patch-size")
                    .intType()
                    .noDefaultValue()
                    .withDescription(
                            "Frames per patch; a still image is repeated this often (preset: 2).");

    public static final ConfigOption<Integer> MERGE_SIZE =
            ConfigOptions.key("stoker.image.merge-size")
                    .intType()
                    .noDefaultValue()
                    .withDescription(
                            "Patches merged per side into one <|image_pad|> token (preset: 2).");

    public static final ConfigOption<Long> MIN_PIXELS =
            ConfigOptions.key("stoker.image.min-pixels")
                    .longType()
                    .noDefaultValue()
                    .withDescription(
                            "smart_resize min_pixels: images are scaled up to at least this many pixels"
                                    + " (preset: 3136 for Qwen2/2.5-VL, 65536 for Qwen3-VL).");

    public static final ConfigOption<Long> MAX_PIXELS =
            ConfigOptions.key("stoker.image.max-pixels")
                    .longType()
                    .noDefaultValue()
                    .withDescription(
                            "smart_resize max_pixels: images are scaled down to at most this many pixels"
                                    + " (preset: 12845056 for Qwen2/2.5-VL, 16777216 for Qwen3-VL).");

    public static final ConfigOption<List<Double>> IMAGE_MEAN =
            ConfigOptions.key("stoker.image.image-mean")
                    .doubleType()
                    .asList()
                    .noDefaultValue()
                    .withDescription(
                            "Per-channel (R;G;B) mean on the 0..1 scale, e.g. 0.5;0.5;0.5 (preset: CLIP"
                                    + " 0.48145466;0.4578275;0.40821073 for Qwen2/2.5-VL, 0.5 for Qwen3-VL).");

    public static final ConfigOption<List<Double>> IMAGE_STD =
            ConfigOptions.key("stoker.image.image-std")
                    .doubleType()
                    .asList()
                    .noDefaultValue()
                    .withDescription(
                            "Per-channel (R;G;B) standard deviation on the 0..1 scale (preset: CLIP"
                                    + " 0.26862954;0.26130258;0.27577711 for Qwen2/2.5-VL, 0.5 for Qwen3-VL).");

    public static final ConfigOption<String> DEFAULT_SYSTEM_PROMPT =
            ConfigOptions.key("stoker.template.default-system-prompt")
                    .stringType()
                    .noDefaultValue()
                    .withDescription(
                            "System prompt the chat template inserts before a conversation that has none;"
                                    + " an empty value inserts none (preset: 'You are a helpful assistant.' for"
                                    + " Qwen2/2.5-VL, none for Qwen3-VL).");

    public static final ConfigOption<Integer> MAX_SEQ_LEN =
            ConfigOptions.key("stoker.max-seq-len")
                    .intType()
                    .noDefaultValue()
                    .withDescription(
                            "Most tokens (input_ids, image tokens included) a sample may have; longer ones"
                                    + " follow stoker.max-seq-len.policy (preset: the model's"
                                    + " max_position_embeddings, 32768 for Qwen2-VL, 128000 for Qwen2.5-VL,"
                                    + " 262144 for Qwen3-VL, the longest row the model can take; set your"
                                    + " training context length, e.g. 8192, to bound memory per row).");

    public static final ConfigOption<SequenceLengthPolicy> MAX_SEQ_LEN_POLICY =
            ConfigOptions.key("stoker.max-seq-len.policy")
                    .enumType(SequenceLengthPolicy.class)
                    .defaultValue(SequenceLengthPolicy.DROP)
                    .withDescription(
                            "What a sample longer than stoker.max-seq-len becomes: DROP (dead-lettered"
                                    + " SEQUENCE_TOO_LONG, 'sequence of N tokens > max-seq-len M'; the slot is"
                                    + " back-filled) or TRUNCATE (input_ids and labels cut at the limit, which"
                                    + " drops the text of the last turns, never inside an image: a cut in an"
                                    + " image block moves before its <|vision_start|>, and that image and all"
                                    + " later ones leave the sample, pixels and grids with them;"
                                    + " SEQUENCE_TOO_LONG if no trained token is left).");

    public static final ConfigOption<Long> MAX_SOURCE_PIXELS =
            ConfigOptions.key("stoker.image.max-source-pixels")
                    .longType()
                    .defaultValue(QwenVisionConfig.DEFAULT_MAX_SOURCE_PIXELS)
                    .withDescription(
                            "Largest decoded image (width x height, read from the header before decoding);"
                                    + " larger ones are dead-lettered as decompression bombs"
                                    + " (IMAGE_TOO_MANY_PIXELS).");

    public static final ConfigOption<Boolean> DCT_DOWNSCALE =
            ConfigOptions.key("stoker.image.dct-downscale")
                    .booleanType()
                    .defaultValue(false)
                    .withDescription(
                            "Fast mode: decode a JPEG at the DCT scale 1/2, 1/4 or 1/8 (the smallest whose"
                                    + " size still covers the smart_resize target on both sides, which is"
                                    + " computed from the full size as before) and resize from there. Needs"
                                    + " libjpeg-turbo. Faster for photos much larger than the target, but it"
                                    + " changes pixels: they no longer match the Hugging Face processor"
                                    + " (mean 0.85, max 56 levels, PSNR 40 dB at 1/2; docs/parity.md). Off:"
                                    + " Pillow-exact decoding.");

    // ---- Video (issue 36; see ModelOptions.videoSettings and docs/parity.md) ----

    public static final ConfigOption<Double> VIDEO_FPS =
            ConfigOptions.key("stoker.video.fps")
                    .doubleType()
                    .noDefaultValue()
                    .withDescription(
                            "Frames per second sampled from a video whose record gives no fps of its own"
                                    + " (preset: 2, Qwen3-VL's video processor default and qwen-vl-utils' FPS"
                                    + " for Qwen2/2.5-VL, whose processors have none).");

    public static final ConfigOption<VideoPreprocessor.FrameRule> VIDEO_FRAME_RULE =
            ConfigOptions.key("stoker.video.frame-rule")
                    .enumType(VideoPreprocessor.FrameRule.class)
                    .noDefaultValue()
                    .withDescription(
                            "Which frames the sampling picks: QWEN2_VL (Qwen2VLVideoProcessor.sample_frames:"
                                    + " an even count, a floored float32 arange) or QWEN3_VL"
                                    + " (Qwen3VLVideoProcessor.sample_frames: linspace, rounded) (preset: the"
                                    + " model's own).");

    public static final ConfigOption<Integer> VIDEO_MIN_FRAMES =
            ConfigOptions.key("stoker.video.min-frames")
                    .intType()
                    .noDefaultValue()
                    .withDescription(
                            "Fewest frames sampled from a video (the processor's min_frames; preset: 4).");

    public static final ConfigOption<Integer> VIDEO_MAX_FRAMES =
            ConfigOptions.key("stoker.video.max-frames")
                    .intType()
                    .noDefaultValue()
                    .withDescription(
                            "Most frames sampled from a video (the processor's max_frames; preset: 768).");

    public static final ConfigOption<Long> VIDEO_MIN_PIXELS =
            ConfigOptions.key("stoker.video.min-pixels")
                    .longType()
                    .noDefaultValue()
                    .withDescription(
                            "The video processor's smallest resized area (size.shortest_edge): of one frame"
                                    + " for Qwen2/2.5-VL, of all frames together for Qwen3-VL (preset: 3136 for"
                                    + " Qwen2/2.5-VL, 4096 for Qwen3-VL). A video part's own min_pixels bounds"
                                    + " each frame.");

    public static final ConfigOption<Long> VIDEO_MAX_PIXELS =
            ConfigOptions.key("stoker.video.max-pixels")
                    .longType()
                    .noDefaultValue()
                    .withDescription(
                            "The video processor's largest resized area (size.longest_edge): of one frame for"
                                    + " Qwen2/2.5-VL, of all frames together for Qwen3-VL (preset: 12845056 for"
                                    + " Qwen2/2.5-VL, 25165824 for Qwen3-VL). A video part's own max_pixels bounds"
                                    + " each frame.");

    public static final ConfigOption<MemorySize> VIDEO_MAX_BYTES =
            ConfigOptions.key("stoker.video.max-bytes")
                    .memoryType()
                    .defaultValue(MemorySize.ofMebiBytes(256))
                    .withDescription(
                            "Largest video file accepted (at most 2 gb - 9 bytes: one Java array); a larger"
                                    + " one is dead-lettered VIDEO_FILE_TOO_LARGE, from its size before reading:"
                                    + " a file's listed size, an s3:// object's total size in the headers of its"
                                    + " GET (which asks for the range bytes=0-<this>, so a server that gives no"
                                    + " total costs at most this many bytes). A video up to"
                                    + " stoker.video.spill-threshold is held whole in memory while its record is"
                                    + " fetched and preprocessed, a larger one in a spill file.");

    public static final ConfigOption<MemorySize> VIDEO_SPILL_THRESHOLD =
            ConfigOptions.key("stoker.video.spill-threshold")
                    .memoryType()
                    .defaultValue(MemorySize.ofMebiBytes(16))
                    .withDescription(
                            "Videos larger than this are not held in memory: the fetch stage streams the"
                                    + " GET (s3://) or copies the file (other roots) into a spill file under"
                                    + " stoker.video.spill-dir, and the media stage decodes it from there (the"
                                    + " same frames as from memory) and deletes it. Memory: a fetch subtask holds"
                                    + " the videos of at most stoker.fetch.capacity records, so at most capacity x"
                                    + " this per video of a record on the heap (default 32 x 16 MiB = 512 MiB),"
                                    + " instead of capacity x stoker.video.max-bytes (8 GiB). Disk: at most"
                                    + " capacity x stoker.video.max-bytes per video of a record, per fetch"
                                    + " subtask (a hedged GET may write a second copy until one of the two wins)."
                                    + " 16 MiB keeps short clips (a minute of 720p H.264 is about 10-20 MB) in"
                                    + " memory, where decoding costs no disk I/O, and sends longer videos to disk,"
                                    + " where they cost page cache instead of heap. Set it to"
                                    + " stoker.video.max-bytes or more to keep every video in memory, 0 to spill"
                                    + " every one.");

    public static final ConfigOption<String> VIDEO_SPILL_DIR =
            ConfigOptions.key("stoker.video.spill-dir")
                    .stringType()
                    .noDefaultValue()
                    .withDescription(
                            "Local directory (an absolute path, created if missing, on every TaskManager)"
                                    + " under which each fetch subtask keeps its video spill files in a"
                                    + " directory of its own,"
                                    + " stoker-video-spill-<job id>-subtask-<index>-attempt-<attempt> (owner-only),"
                                    + " deleted when the subtask closes, fails or is cancelled; a subtask that"
                                    + " starts deletes the ones its earlier attempts left on that machine (a"
                                    + " TaskManager that died). Give it a local disk with room for the bound in"
                                    + " stoker.video.spill-threshold. Unset: the TaskManager JVM's"
                                    + " java.io.tmpdir, which is also the default of Flink's io.tmp.dirs (Flink"
                                    + " 2.3 gives a user function no access to io.tmp.dirs itself).");

    public static final ConfigOption<Long> VIDEO_MAX_SOURCE_PIXELS =
            ConfigOptions.key("stoker.video.max-source-pixels")
                    .longType()
                    .defaultValue(7680L * 4320)
                    .withDescription(
                            "Largest video frame (width x height from the container, checked before decoding"
                                    + " and again on every frame); a larger video is dead-lettered"
                                    + " VIDEO_TOO_MANY_PIXELS. Default: 8K UHD.");

    public static final ConfigOption<Integer> VIDEO_MAX_SOURCE_FRAMES =
            ConfigOptions.key("stoker.video.max-source-frames")
                    .intType()
                    .defaultValue(108_000)
                    .withDescription(
                            "Largest frame count a video's container may report, and the most frames decoded"
                                    + " to reach the sampled ones (decoding runs from the start); a longer video"
                                    + " is dead-lettered VIDEO_TOO_MANY_FRAMES. Default: an hour at 30 fps.");

    public static final ConfigOption<MemorySize> VIDEO_MAX_SAMPLED_SIZE =
            ConfigOptions.key("stoker.video.max-sampled-size")
                    .memoryType()
                    .defaultValue(MemorySize.parse("2gb"))
                    .withDescription(
                            "Largest size of one video's sampled frames decoded to RGB (frames x width x"
                                    + " height x 3, from the container's frame size, checked before decoding),"
                                    + " which a preprocess subtask holds at once before resizing them; a larger"
                                    + " video is dead-lettered VIDEO_TOO_MANY_FRAMES. 768 frames of 1080p are"
                                    + " 4.4 GiB: raise it with the TaskManager heap, or lower"
                                    + " stoker.video.fps or stoker.video.max-frames.");

    // ---- S3 (image fetch from s3:// dataset roots; the JSONL and checkpoints go through Flink's
    // S3 plugin) ----

    public static final ConfigOption<String> S3_ENDPOINT =
            ConfigOptions.key("stoker.s3.endpoint")
                    .stringType()
                    .noDefaultValue()
                    .withFallbackKeys("s3.endpoint")
                    .withDescription(
                            "Endpoint of an S3-compatible server, e.g. http://127.0.0.1:9000. Unset: AWS's regional"
                                    + " endpoint. Falls back to Flink's s3.endpoint, so one setting serves the S3"
                                    + " filesystem plugin (JSONL, checkpoints) and the image fetch.");

    public static final ConfigOption<String> S3_REGION =
            ConfigOptions.key("stoker.s3.region")
                    .stringType()
                    .defaultValue("us-east-1")
                    .withDescription(
                            "AWS region of the image bucket (signing region for S3-compatible servers).");

    public static final ConfigOption<Boolean> S3_PATH_STYLE_ACCESS =
            ConfigOptions.key("stoker.s3.path-style-access")
                    .booleanType()
                    .defaultValue(false)
                    .withFallbackKeys("s3.path.style.access")
                    .withDescription(
                            "Path-style requests (endpoint/bucket/key), as most S3-compatible servers need."
                                    + " Falls back to Flink's s3.path.style.access.");

    public static final ConfigOption<String> S3_ACCESS_KEY =
            ConfigOptions.key("stoker.s3.access-key")
                    .stringType()
                    .noDefaultValue()
                    .withFallbackKeys("s3.access-key")
                    .withDescription(
                            "Access key id for the image fetch. Unset (with the secret key): the AWS default"
                                    + " credential chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, profile, web"
                                    + " identity, container or instance role). Falls back to Flink's s3.access-key.");

    /** Its key contains "secret", so Flink masks its value in logs and the web UI. */
    public static final ConfigOption<String> S3_SECRET_KEY =
            ConfigOptions.key("stoker.s3.secret-key")
                    .stringType()
                    .noDefaultValue()
                    .withFallbackKeys("s3.secret-key")
                    .withDescription(
                            "Secret access key for the image fetch (masked by Flink as a sensitive key). Prefer the"
                                    + " default credential chain. Falls back to Flink's s3.secret-key.");

    public static final ConfigOption<Integer> S3_MAX_CONNECTIONS =
            ConfigOptions.key("stoker.s3.max-connections")
                    .intType()
                    .defaultValue(64)
                    .withDescription(
                            "HTTP connections of each fetch subtask's S3 client: the most image GETs (hedged"
                                    + " GETs and HEADs included) on the wire at once. Further GETs wait for a"
                                    + " connection, without blocking and before their timeouts start; the wait is"
                                    + " named in a timeout's dead letter and shown by the gauge"
                                    + " s3.getsWaitingForConnection. Default 64: twice the default async capacity,"
                                    + " room for records with two images and for hedged GETs.");

    public static final ConfigOption<Integer> S3_MAX_ATTEMPTS =
            ConfigOptions.key("stoker.s3.max-attempts")
                    .intType()
                    .defaultValue(10)
                    .withDescription(
                            "Attempts per image GET, the first included. Throttling (503 SlowDown), 5xx,"
                                    + " connection errors and attempt timeouts are retried with exponential backoff"
                                    + " and full jitter (the AWS SDK's standard retry strategy, delays"
                                    + " stoker.s3.retry-base-delay and stoker.s3.retry-max-delay); 403 and 404"
                                    + " never are. With the defaults the attempts last about as long as"
                                    + " stoker.s3.request-timeout even when every one fails fast (a 2 s connect"
                                    + " timeout to an unreachable store), so an outage of the store shorter"
                                    + " than that costs no record; with 5 attempts a 15 s outage dead-lettered"
                                    + " records after 10.5 s (bench/faults.sh).");

    public static final ConfigOption<Duration> S3_READ_TIMEOUT =
            ConfigOptions.key("stoker.s3.read-timeout")
                    .durationType()
                    .defaultValue(Duration.ofSeconds(2))
                    .withDescription(
                            "Longest wait for the next byte of an image GET's response, its first byte"
                                    + " included (the HTTP client's read timeout, at least 1 ms): an attempt that"
                                    + " receives nothing for this long is abandoned and retried like one past its"
                                    + " attempt timeout, so a request the store leaves unanswered costs this long"
                                    + " instead of stoker.s3.attempt-timeout (bench/README.md, the collapse"
                                    + " reproduced: a store that leaves GETs unanswered). A body that keeps"
                                    + " arriving is not cut by it. Video GETs, which may stream into spill files"
                                    + " (the client reads only as fast as those writes go), and the start-up"
                                    + " check's listings are limited by the attempt timeout alone. Default 2 s,"
                                    + " after AWS's guideline to retry a small GET after 2 s (Optimizing Amazon"
                                    + " S3 performance: timeouts and retries for latency-sensitive applications);"
                                    + " raise it for a store whose first byte can take longer.");

    public static final ConfigOption<Duration> S3_ATTEMPT_TIMEOUT =
            ConfigOptions.key("stoker.s3.attempt-timeout")
                    .durationType()
                    .defaultValue(Duration.ofSeconds(10))
                    .withDescription(
                            "Time limit of one GET attempt (at most the request timeout); an attempt that exceeds"
                                    + " it is retried.");

    public static final ConfigOption<Duration> S3_REQUEST_TIMEOUT =
            ConfigOptions.key("stoker.s3.request-timeout")
                    .durationType()
                    .defaultValue(Duration.ofSeconds(30))
                    .withDescription(
                            "Time limit of one GET with all its retries (dead letter FETCH_TIMEOUT). If set, it"
                                    + " must be below stoker.fetch.timeout; if not, it is at most 90% of it.");

    public static final ConfigOption<Duration> S3_RETRY_BASE_DELAY =
            ConfigOptions.key("stoker.s3.retry-base-delay")
                    .durationType()
                    .defaultValue(Duration.ofMillis(100))
                    .withDescription(
                            "Base delay of the exponential backoff between attempts (5x for throttling errors).");

    public static final ConfigOption<Double> S3_GETS_PER_SECOND_PER_PREFIX =
            ConfigOptions.key("stoker.s3.max-gets-per-second-per-prefix")
                    .doubleType()
                    .defaultValue(0.0)
                    .withDescription(
                            "Client-side limit of image GETs per second per key prefix (the key's directory),"
                                    + " per fetch subtask; GETs wait (without blocking) instead of running into"
                                    + " 503 SlowDown. S3 serves about 5500 GET/s per prefix; 0 = no limit.");

    public static final ConfigOption<Duration> S3_HEDGE_AFTER =
            ConfigOptions.key("stoker.s3.hedge-after")
                    .durationType()
                    .defaultValue(Duration.ZERO)
                    .withDescription(
                            "Send a second, identical image GET when the first is still running after this"
                                    + " long (and a connection is free); the first success wins and the other is"
                                    + " cancelled. A stuck GET then costs this long instead of the attempt timeout,"
                                    + " but a GET waiting in retry backoff (throttling) is hedged too and doubles"
                                    + " the requests, so it is off by default (bench/README.md, stuck GETs);"
                                    + " 1 s suits a store with stuck connections and no throttling; 0 = off.");

    public static final ConfigOption<Duration> S3_RETRY_MAX_DELAY =
            ConfigOptions.key("stoker.s3.retry-max-delay")
                    .durationType()
                    .defaultValue(Duration.ofSeconds(5))
                    .withDescription("Longest single backoff delay between attempts.");

    public static final ConfigOption<Integer> TOPOLOGY_NODES =
            ConfigOptions.key("stoker.topology.nodes")
                    .intType()
                    .defaultValue(1)
                    .withDescription(
                            "GPU nodes of the training job. Each has dp-world-size / nodes ranks (which must"
                                    + " divide), global rank = node x ranks per node + local rank (torchrun's"
                                    + " order), and its own sink (uid arrow-shm-sink-node-<n>, one subtask per"
                                    + " rank) that writes its ranks' batches into that node's output root."
                                    + " 1 with placement ANY is the single-node job (one sink, uid"
                                    + " arrow-shm-sink). docs/multi-node.md.");

    public static final ConfigOption<Topology.Placement> TOPOLOGY_PLACEMENT =
            ConfigOptions.key("stoker.topology.placement")
                    .enumType(Topology.Placement.class)
                    .defaultValue(Topology.Placement.ANY)
                    .withDescription(
                            "ANY: every subtask takes any slot (the embedded MiniCluster, a single-node"
                                    + " cluster). EDGE: pinned by fine-grained resources: the CPU stages (source"
                                    + " to tokenize, the dead-letter sink) in slot sharing group 'cpu' request"
                                    + " the external resource stoker-cpu, node n's sink in group 'edge-<n>'"
                                    + " requests stoker-node-<n>, so it runs only on the edge TaskManager that"
                                    + " declares it (external-resources: stoker-node-<n>, amount = its ranks);"
                                    + " needs the default scheduler (the adaptive one ignores the"
                                    + " requests) and the slot profiles stoker.topology.*-slot.*.");

    public static final ConfigOption<List<String>> TOPOLOGY_ACK_ADDRESSES =
            ConfigOptions.key("stoker.topology.ack-addresses")
                    .stringType()
                    .asList()
                    .defaultValues()
                    .withDescription(
                            "host:port per GPU node, in node order (';'-separated): node n's sink subtask k"
                                    + " serves its node's acks over HTTP on host:port+k, and the source's"
                                    + " enumerator on the JobManager polls them for the prefetch gate. Empty:"
                                    + " the JobManager reads the ack files under its own output root, so it must"
                                    + " run on the ranks' node. Required when nodes > 1 with placement EDGE.");

    public static final ConfigOption<Duration> TOPOLOGY_ACK_POLL_INTERVAL =
            ConfigOptions.key("stoker.topology.ack-poll-interval")
                    .durationType()
                    .defaultValue(Duration.ofMillis(100))
                    .withDescription(
                            "With stoker.topology.ack-addresses: how often the prefetch gate (the source's"
                                    + " enumerator on the JobManager) asks every GPU node's sinks for their ranks'"
                                    + " acks, one HTTP request per node each time. The gate opens a step up to"
                                    + " this plus one round trip after the trainer acknowledged; keep it well under"
                                    + " a training step. Without ack addresses the gate reads the local ack files"
                                    + " every 20 ms.");

    public static final ConfigOption<Double> CPU_SLOT_CPU_CORES =
            ConfigOptions.key("stoker.topology.cpu-slot.cpu-cores")
                    .doubleType()
                    .defaultValue(1.0)
                    .withDescription(
                            "Placement EDGE: CPU cores one slot of the CPU stages requests.");

    public static final ConfigOption<MemorySize> CPU_SLOT_TASK_HEAP =
            ConfigOptions.key("stoker.topology.cpu-slot.task-heap")
                    .memoryType()
                    .defaultValue(MemorySize.parse("192mb"))
                    .withDescription(
                            "Placement EDGE: task heap one slot of the CPU stages requests (images in"
                                    + " flight: fetch capacity x encoded and decoded sizes). The default fits two"
                                    + " slots of a 2g TaskManager (scripts/cluster.sh); size it to the TaskManagers.");

    public static final ConfigOption<MemorySize> CPU_SLOT_TASK_OFF_HEAP =
            ConfigOptions.key("stoker.topology.cpu-slot.task-off-heap")
                    .memoryType()
                    .defaultValue(MemorySize.ZERO)
                    .withDescription(
                            "Placement EDGE: task off-heap memory one slot of the CPU stages requests.");

    public static final ConfigOption<MemorySize> CPU_SLOT_MANAGED =
            ConfigOptions.key("stoker.topology.cpu-slot.managed")
                    .memoryType()
                    .defaultValue(MemorySize.parse("32mb"))
                    .withDescription(
                            "Placement EDGE: managed memory one slot of the CPU stages requests.");

    public static final ConfigOption<Double> EDGE_SLOT_CPU_CORES =
            ConfigOptions.key("stoker.topology.edge-slot.cpu-cores")
                    .doubleType()
                    .defaultValue(0.5)
                    .withDescription(
                            "Placement EDGE: CPU cores one sink slot (one rank) requests.");

    public static final ConfigOption<MemorySize> EDGE_SLOT_TASK_HEAP =
            ConfigOptions.key("stoker.topology.edge-slot.task-heap")
                    .memoryType()
                    .defaultValue(MemorySize.parse("128mb"))
                    .withDescription(
                            "Placement EDGE: task heap one sink slot requests (the slots of its rank's"
                                    + " batches in flight). The edge TaskManager needs ranks x this.");

    public static final ConfigOption<MemorySize> EDGE_SLOT_TASK_OFF_HEAP =
            ConfigOptions.key("stoker.topology.edge-slot.task-off-heap")
                    .memoryType()
                    .defaultValue(MemorySize.ZERO)
                    .withDescription(
                            "Placement EDGE: task off-heap memory one sink slot requests (the Arrow buffers"
                                    + " are native memory outside it, in the process's overhead).");

    public static final ConfigOption<MemorySize> EDGE_SLOT_MANAGED =
            ConfigOptions.key("stoker.topology.edge-slot.managed")
                    .memoryType()
                    .defaultValue(MemorySize.parse("32mb"))
                    .withDescription(
                            "Placement EDGE: managed memory one sink slot requests (the keyed sink's RocksDB"
                                    + " backend).");
}

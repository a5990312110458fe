package dev.stoker.operators.tokenize;

import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.DeadLetters;
import dev.stoker.operators.model.PerSource;
import dev.stoker.operators.model.PreprocessedRecord;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.TokenizedSample;
import java.io.IOException;
import java.nio.file.AccessDeniedException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.runtime.execution.SuppressRestartsException;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.util.Collector;

/**
 * Flink operator that renders the model's Qwen-VL chat template (each mixture source may have its
 * own default system prompt and maximum sequence length), tokenizes it with label masking and
 * attaches the images' resized RGB pixels and {@code image_grid_thw} (see {@link SampleTokenizer}).
 * The tokenizer of a directory holding {@code tokenizer.json} is taken in {@link
 * #open(OpenContext)} and closed or released in {@link #close()}: a handle on the shared one when
 * something in the job's class loader holds it (the embedded job's client, {@link
 * ChatTokenizer#sharedIfHeld}), otherwise a tokenizer of the subtask's own. (Subtasks of a
 * TaskManager sharing one kept the job's class loader alive after the job, seen in {@code
 * test_cluster_job_reuse.py}; so under a cluster each subtask loads its own.) Records that cannot
 * be tokenized go to the {@link DeadLetters#TAG} side output with {@code TOKENIZATION_FAILED},
 * samples over the maximum sequence length (policy {@code DROP}, or nothing trainable left after
 * {@code TRUNCATE}) with {@code SEQUENCE_TOO_LONG}.
 */
public class TokenizeFunction extends ProcessFunction<PreprocessedRecord, TokenizedSample> {
    private static final long serialVersionUID = 1L;

    private final String tokenizerDir;
    private final int mergeSize;
    private final PerSource<QwenChatTemplate> templates;
    private final PerSource<Integer> maxSeqLens;
    private final SequenceLengthPolicy policy;
    private transient ChatTokenizer tokenizer;
    private transient Map<String, SampleTokenizer> samples;

    /**
     * @param tokenizerDir directory containing {@code tokenizer.json}, readable on every
     *     TaskManager
     * @param mergeSize the vision merge size (2 for Qwen2-VL, Qwen2.5-VL and Qwen3-VL)
     * @param templates each source's chat template (the model preset's, with the source's default
     *     system prompt)
     * @param maxSeqLens each source's most tokens a sample may have
     * @param policy what happens to a longer sample (see {@link SampleTokenizer})
     * @throws IllegalArgumentException when {@code mergeSize} is below 1
     */
    public TokenizeFunction(
            String tokenizerDir,
            int mergeSize,
            PerSource<QwenChatTemplate> templates,
            PerSource<Integer> maxSeqLens,
            SequenceLengthPolicy policy) {
        if (mergeSize < 1) {
            throw new IllegalArgumentException("mergeSize must be positive, got " + mergeSize);
        }
        this.tokenizerDir = tokenizerDir;
        this.mergeSize = mergeSize;
        this.templates = templates;
        this.maxSeqLens = maxSeqLens;
        this.policy = policy;
    }

    /**
     * Takes a handle on the held shared tokenizer, or loads one of its own.
     *
     * @throws SuppressRestartsException when {@code tokenizer.json} is missing or unreadable on
     *     this TaskManager, or not a Qwen2-VL tokenizer: restarting cannot heal that, so the job
     *     fails with this reason instead of restarting (other I/O errors are thrown as they are,
     *     and the restart strategy decides)
     */
    @Override
    public void open(OpenContext openContext) throws Exception {
        try {
            Path dir = Path.of(tokenizerDir);
            ChatTokenizer held = ChatTokenizer.sharedIfHeld(dir);
            tokenizer = held != null ? held : ChatTokenizer.open(dir);
        } catch (NoSuchFileException | AccessDeniedException | IllegalStateException e) {
            throw new SuppressRestartsException(
                    new IOException(
                            "the tokenizer in "
                                    + tokenizerDir
                                    + " does not load in "
                                    + getRuntimeContext().getTaskInfo().getTaskNameWithSubtasks()
                                    + " (the path must exist on every TaskManager): "
                                    + e,
                            e));
        }
        samples = new HashMap<>();
    }

    @Override
    public void processElement(
            PreprocessedRecord record, Context ctx, Collector<TokenizedSample> out) {
        try {
            out.collect(tokenizerOf(record).tokenize(record));
        } catch (RejectedRecordException e) {
            ctx.output(DeadLetters.TAG, DeadLetter.of(record.record.ref, e));
        }
    }

    private SampleTokenizer tokenizerOf(PreprocessedRecord record) {
        return samples.computeIfAbsent(
                record.record.ref.source,
                s ->
                        new SampleTokenizer(
                                tokenizer,
                                templates.of(record.record.ref),
                                mergeSize,
                                maxSeqLens.of(record.record.ref),
                                policy));
    }

    @Override
    public void close() throws Exception {
        if (tokenizer != null) {
            tokenizer.close();
            tokenizer = null;
        }
    }
}

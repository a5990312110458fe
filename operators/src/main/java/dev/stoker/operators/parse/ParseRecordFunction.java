package dev.stoker.operators.parse;

import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.DeadLetters;
import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import dev.stoker.operators.model.Stage;
import java.util.EnumMap;
import java.util.Map;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.metrics.Counter;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.util.Collector;

/**
 * Flink operator wrapping {@link SftRecordParser}: valid lines are emitted as {@link SftRecord}s,
 * rejected ones go to the {@link DeadLetters#TAG} side output as {@link DeadLetter}s (with the record
 * id when it could be read). Counts rejections per reason in the metrics {@code rejected_<REASON>}.
 */
public class ParseRecordFunction extends ProcessFunction<JsonlLine, SftRecord> {
    private static final long serialVersionUID = 1L;

    private final SftRecordParser parser = new SftRecordParser();
    private transient Map<RejectReason, Counter> rejected;

    @Override
    public void open(OpenContext openContext) {
        rejected = new EnumMap<>(RejectReason.class);
        for (RejectReason reason : RejectReason.values()) {
            if (reason.stage() == Stage.PARSE) {
                rejected.put(reason, getRuntimeContext().getMetricGroup().counter("rejected_" + reason.name()));
            }
        }
    }

    @Override
    public void processElement(JsonlLine line, Context ctx, Collector<SftRecord> out) {
        try {
            out.collect(parser.parse(line));
        } catch (RejectedRecordException e) {
            DeadLetter letter = DeadLetter.of(e instanceof RecordParseException p ? p.ref() : line.ref, e);
            ctx.output(DeadLetters.TAG, letter);
            rejected.get(e.reason()).inc();
        }
    }
}

package dev.stoker.operators.parse;

import dev.stoker.operators.accounting.Accounting;
import dev.stoker.operators.model.DeadLetter;
import dev.stoker.operators.model.DeadLetters;
import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.PerSource;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.util.Collector;

/**
 * Flink operator wrapping {@link SftRecordParser}: each line is read in its source's {@link
 * RecordFormat}; valid lines are emitted as {@link SftRecord}s, rejected ones go to the {@link
 * DeadLetters#TAG} side output as {@link DeadLetter}s (with the record id when it could be read).
 * Every line it sees counts as a record read ({@link Accounting#RECORDS_READ}, in total and per
 * mixture source); rejections are counted downstream by {@code DeadLetterAccounting}.
 */
public class ParseRecordFunction extends ProcessFunction<JsonlLine, SftRecord> {
    private static final long serialVersionUID = 1L;

    private final SftRecordParser parser = new SftRecordParser();
    private final PerSource<RecordFormat> formats;
    private transient Accounting.Count recordsRead;

    /**
     * @param formats each mixture source's record format
     */
    public ParseRecordFunction(PerSource<RecordFormat> formats) {
        this.formats = formats;
    }

    @Override
    public void open(OpenContext openContext) {
        recordsRead = new Accounting.Count(getRuntimeContext(), Accounting.RECORDS_READ);
    }

    @Override
    public void processElement(JsonlLine line, Context ctx, Collector<SftRecord> out) {
        recordsRead.add(line.ref.source, 1);
        try {
            out.collect(parser.parse(line, formats.of(line.ref)));
        } catch (RejectedRecordException e) {
            DeadLetter letter =
                    DeadLetter.of(e instanceof RecordParseException p ? p.ref() : line.ref, e);
            ctx.output(DeadLetters.TAG, letter);
        }
    }
}

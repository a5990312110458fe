package dev.stoker.connectors.deadletter;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.stoker.operators.json.Json;
import dev.stoker.operators.model.DeadLetter;
import java.io.IOException;
import java.io.OutputStream;
import org.apache.flink.api.common.serialization.Encoder;

/**
 * Encodes a {@link DeadLetter} as one JSON line: {@code {"source", "file", "line", "sample_index",
 * "record_id", "stage", "reason", "message"}} ({@code source}: the record's mixture source).
 */
public final class DeadLetterJsonEncoder implements Encoder<DeadLetter> {
    private static final long serialVersionUID = 1L;
    private static final ObjectMapper JSON = Json.mapper();

    @Override
    public void encode(DeadLetter dl, OutputStream out) throws IOException {
        out.write(JSON.writeValueAsBytes(toJson(dl)));
        out.write('\n');
    }

    /** The JSON object written for {@code dl}. */
    public static ObjectNode toJson(DeadLetter dl) {
        ObjectNode node = JSON.createObjectNode();
        node.put("source", dl.ref.source);
        node.put("file", dl.ref.file);
        node.put("line", dl.ref.line);
        node.put("sample_index", dl.ref.sampleIndex);
        node.put("record_id", dl.ref.recordId);
        node.put("stage", dl.stage.name().toLowerCase());
        node.put("reason", dl.reason.name());
        node.put("message", dl.message);
        return node;
    }
}

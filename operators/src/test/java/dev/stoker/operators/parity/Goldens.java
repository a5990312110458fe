package dev.stoker.operators.parity;

import java.io.IOException;
import java.net.URISyntaxException;
import java.net.URL;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowFileReader;
import org.apache.arrow.vector.util.Text;

/**
 * Reads the parity goldens written by {@code scripts/golden/make_golden.py} (Arrow IPC files in
 * {@code src/test/resources/parity/}) into plain rows: column name to value, with Arrow strings as
 * {@link String}, binaries as {@code byte[]}, integers as {@link Integer}, lists as {@link List}.
 */
final class Goldens {
    private Goldens() {}

    /**
     * All rows of {@code parity/<name>}; fails with the regeneration command when it is missing.
     */
    static List<Map<String, Object>> read(String name) {
        URL url = Goldens.class.getResource("/parity/" + name);
        if (url == null) {
            throw new IllegalStateException(
                    "golden file parity/"
                            + name
                            + " is missing; regenerate with .venv-golden/bin/python"
                            + " scripts/golden/make_golden.py (see docs/parity.md)");
        }
        List<Map<String, Object>> rows = new ArrayList<>();
        try (BufferAllocator allocator = new RootAllocator();
                FileChannel channel =
                        FileChannel.open(Path.of(url.toURI()), StandardOpenOption.READ);
                ArrowFileReader reader = new ArrowFileReader(channel, allocator)) {
            VectorSchemaRoot root = reader.getVectorSchemaRoot();
            while (reader.loadNextBatch()) {
                for (int i = 0; i < root.getRowCount(); i++) {
                    Map<String, Object> row = new LinkedHashMap<>();
                    for (FieldVector vector : root.getFieldVectors()) {
                        row.put(vector.getName(), plain(vector.getObject(i)));
                    }
                    rows.add(row);
                }
            }
        } catch (IOException | URISyntaxException e) {
            throw new IllegalStateException("cannot read golden file parity/" + name, e);
        }
        return rows;
    }

    private static Object plain(Object value) {
        if (value instanceof Text text) {
            return text.toString();
        }
        if (value instanceof List<?> list) {
            List<Object> out = new ArrayList<>(list.size());
            for (Object item : list) {
                out.add(plain(item));
            }
            return out;
        }
        return value;
    }

    /** An int32 list column as an array. */
    static long[] longs(Object list) {
        List<?> values = (List<?>) list;
        long[] out = new long[values.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ((Number) values.get(i)).longValue();
        }
        return out;
    }
}

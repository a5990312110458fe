package dev.stoker.operators.parity;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowFileReader;
import org.apache.arrow.vector.util.Text;

/**
 * The parity goldens of {@code scripts/golden/make_golden.py}, generated at test time with the real
 * Hugging Face processors (the model venv {@code .stoker/model-venv}, which {@code ./stoker test}
 * creates before the Java tests) into {@code target/parity-goldens/} once per build (again when the
 * script is newer than them; about 85 s, byte-identical from run to run), and read into plain rows:
 * column name to value, with Arrow strings as {@link String}, binaries as {@code byte[]}, integers
 * as {@link Integer}, lists as {@link List}.
 */
final class Goldens {
    /** The files the script writes; the last one is written last (its presence means complete). */
    private static final String[] FILES = {
        "tokens.arrow", "pixels.arrow", "pixel_values.arrow", "summary.json"
    };

    private static Path dir;

    private Goldens() {}

    /**
     * All rows of the golden {@code name}.
     *
     * @throws IllegalStateException when the model venv is missing or the script fails, with its
     *     output
     */
    static List<Map<String, Object>> read(String name) {
        Path file = generated().resolve(name);
        List<Map<String, Object>> rows = new ArrayList<>();
        try (BufferAllocator allocator = new RootAllocator();
                FileChannel channel = FileChannel.open(file, StandardOpenOption.READ);
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
        } catch (IOException e) {
            throw new IllegalStateException("cannot read golden file " + file, e);
        }
        return rows;
    }

    /** The directory of the generated goldens, generating them first when needed. */
    private static synchronized Path generated() {
        if (dir != null) {
            return dir;
        }
        Path repo = Path.of("").toAbsolutePath().getParent();
        Path script = repo.resolve("scripts/golden/make_golden.py");
        Path out = Path.of("target", "parity-goldens").toAbsolutePath();
        Path last = out.resolve(FILES[FILES.length - 1]);
        try {
            if (!Files.isRegularFile(last)
                    || Files.getLastModifiedTime(last).compareTo(Files.getLastModifiedTime(script))
                            < 0) {
                generate(repo, script, out);
            }
        } catch (IOException | InterruptedException e) {
            throw new IllegalStateException("cannot generate the parity goldens into " + out, e);
        }
        dir = out;
        return dir;
    }

    private static void generate(Path repo, Path script, Path out)
            throws IOException, InterruptedException {
        Path python = repo.resolve(".stoker/model-venv/bin/python");
        if (!Files.isExecutable(python)) {
            throw new IllegalStateException(
                    python
                            + " is missing: the parity goldens are generated with the real Hugging"
                            + " Face processors of the model venv. `./stoker test` creates it, or:"
                            + " python3 -m venv .stoker/model-venv &&"
                            + " .stoker/model-venv/bin/pip install -r python/requirements-model.txt");
        }
        Files.createDirectories(out);
        Files.deleteIfExists(out.resolve(FILES[FILES.length - 1]));
        Path log = out.resolve("make_golden.log");
        Process p =
                new ProcessBuilder(python.toString(), script.toString(), "--out", out.toString())
                        .redirectErrorStream(true)
                        .redirectOutput(log.toFile())
                        .start();
        boolean finished = p.waitFor(10, TimeUnit.MINUTES);
        if (!finished) {
            p.destroyForcibly();
        }
        if (!finished || p.exitValue() != 0) {
            throw new IllegalStateException(
                    "make_golden.py "
                            + (finished ? "failed (exit " + p.exitValue() + ")" : "timed out")
                            + ":\n"
                            + Files.readString(log));
        }
        for (String f : FILES) {
            if (!Files.isRegularFile(out.resolve(f))) {
                throw new IllegalStateException("make_golden.py wrote no " + f + " into " + out);
            }
        }
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

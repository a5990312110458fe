package dev.stoker.operators.parity;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.FileTime;
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
 * One set of golden files made by a script of {@code scripts/golden/} with the real Hugging Face
 * processors of the model venv ({@code .stoker/model-venv}, which {@code ./stoker test} creates
 * before the Java tests), generated at test time into {@code target/<outDir>/} once per build
 * (again when the script, or a file it imports, is newer than the set's last file, which the script
 * writes last), and read into plain rows: column name to value, with Arrow strings as {@link
 * String}, binaries as {@code byte[]}, integers as {@link Integer} or {@link Long} (int32 / int64),
 * floats as {@link Double} (float64), lists as {@link List}, nulls as {@code null}.
 *
 * <p>The script runs with the test JVM's environment (so {@code PYTHONPATH} reaches it) and the
 * working directory of the module ({@code operators}); its output goes to {@code
 * target/<outDir>/<script name>.log}.
 *
 * <p>The sets: {@link #PARITY} (images and tokens, {@code make_golden.py}), {@link #VIDEO} ({@code
 * make_video_golden.py}) and {@link #VIDEO_CHAT} ({@code make_video_chat_golden.py}).
 */
public final class GoldenSet {
    /**
     * {@code scripts/golden/make_golden.py}: {@code tokens.arrow}, {@code pixels.arrow}, {@code
     * pixel_values.arrow} (about 85 s).
     */
    public static final GoldenSet PARITY =
            new GoldenSet(
                    "scripts/golden/make_golden.py",
                    "parity-goldens",
                    List.of("tokens.arrow", "pixels.arrow", "pixel_values.arrow", "summary.json"),
                    List.of());

    /**
     * {@code scripts/golden/make_video_golden.py}: the clips under {@code clips/} and {@code
     * clips.arrow}, {@code videos.arrow}, {@code frame_indices.arrow}, and the frame-list videos
     * under {@code frames/} with {@code frame_videos.arrow} (about 25 s; needs PyAV, see {@code
     * scripts/golden/requirements.txt}); the schema is in the script's docstring and {@code
     * docs/parity.md}. The script reads the presets of {@code make_golden.py}, so a change of
     * either regenerates it.
     */
    public static final GoldenSet VIDEO =
            new GoldenSet(
                    "scripts/golden/make_video_golden.py",
                    "video-goldens",
                    List.of(
                            "clips.arrow",
                            "videos.arrow",
                            "frame_videos.arrow",
                            "frame_indices.arrow",
                            "summary.json"),
                    List.of("scripts/golden/make_golden.py"));

    /**
     * {@code scripts/golden/make_video_chat_golden.py}: {@code chats.arrow}, chat conversations
     * with videos through each preset's processor (a few seconds); the schema is in the script's
     * docstring. The script reads the presets of {@code make_golden.py}.
     */
    public static final GoldenSet VIDEO_CHAT =
            new GoldenSet(
                    "scripts/golden/make_video_chat_golden.py",
                    "video-chat-goldens",
                    List.of("chats.arrow", "summary.json"),
                    List.of("scripts/golden/make_golden.py"));

    private final String script;
    private final String outDir;
    private final List<String> files;

    /** Other files the script reads: a change of one regenerates the set too. */
    private final List<String> imports;

    private Path dir;

    private GoldenSet(String script, String outDir, List<String> files, List<String> imports) {
        this.script = script;
        this.outDir = outDir;
        this.files = files;
        this.imports = imports;
    }

    /**
     * All rows of the golden Arrow IPC file {@code name} of this set.
     *
     * @throws IllegalStateException when the model venv is missing, the script fails (with its
     *     output) or the file cannot be read
     */
    public List<Map<String, Object>> read(String name) {
        Path file = dir().resolve(name);
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

    /**
     * The absolute directory of the generated set (e.g. the video clips are {@code
     * dir().resolve("clips/<name>")}), generating it first when needed.
     *
     * @throws IllegalStateException when the model venv is missing or the script fails
     */
    public synchronized Path dir() {
        if (dir != null) {
            return dir;
        }
        Path repo = Path.of("").toAbsolutePath().getParent();
        Path scriptPath = repo.resolve(script);
        Path out = Path.of("target", outDir).toAbsolutePath();
        Path last = out.resolve(files.get(files.size() - 1));
        try {
            boolean stale = !Files.isRegularFile(last);
            List<String> inputs = new ArrayList<>(imports);
            inputs.add(script);
            for (String input : inputs) {
                if (!stale) {
                    FileTime changed = Files.getLastModifiedTime(repo.resolve(input));
                    stale = changed.compareTo(Files.getLastModifiedTime(last)) > 0;
                }
            }
            if (stale) {
                generate(repo, scriptPath, out);
            }
        } catch (IOException | InterruptedException e) {
            throw new IllegalStateException("cannot generate the goldens into " + out, e);
        }
        dir = out;
        return dir;
    }

    private void generate(Path repo, Path scriptPath, Path out)
            throws IOException, InterruptedException {
        Path python = repo.resolve(".stoker/model-venv/bin/python");
        if (!Files.isExecutable(python)) {
            throw new IllegalStateException(
                    python
                            + " is missing: the goldens are generated with the real Hugging"
                            + " Face processors of the model venv. `./stoker test` creates it, or:"
                            + " python3 -m venv .stoker/model-venv &&"
                            + " .stoker/model-venv/bin/pip install -r python/requirements-model.txt");
        }
        String name = scriptPath.getFileName().toString();
        Files.createDirectories(out);
        Files.deleteIfExists(out.resolve(files.get(files.size() - 1)));
        Path log = out.resolve(name.replaceFirst("\\.py$", "") + ".log");
        Process p =
                new ProcessBuilder(
                                python.toString(), scriptPath.toString(), "--out", out.toString())
                        .redirectErrorStream(true)
                        .redirectOutput(log.toFile())
                        .start();
        boolean finished = p.waitFor(10, TimeUnit.MINUTES);
        if (!finished) {
            p.destroyForcibly();
        }
        if (!finished || p.exitValue() != 0) {
            throw new IllegalStateException(
                    name
                            + " "
                            + (finished ? "failed (exit " + p.exitValue() + ")" : "timed out")
                            + " (its pins: scripts/golden/requirements.txt):\n"
                            + Files.readString(log));
        }
        for (String f : files) {
            if (!Files.isRegularFile(out.resolve(f))) {
                throw new IllegalStateException(name + " wrote no " + f + " into " + out);
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

    /** An integer list column (int32 or int64) as an array. */
    public static long[] longs(Object list) {
        List<?> values = (List<?>) list;
        long[] out = new long[values.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ((Number) values.get(i)).longValue();
        }
        return out;
    }

    /** A binary column of little-endian float32 values (e.g. {@code pixel_values_videos}). */
    public static float[] float32(byte[] bytes) {
        float[] out = new float[bytes.length / Float.BYTES];
        ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
        return out;
    }

    @Override
    public String toString() {
        return script + " -> target/" + outDir;
    }
}

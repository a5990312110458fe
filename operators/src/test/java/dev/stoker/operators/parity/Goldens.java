package dev.stoker.operators.parity;

import java.util.List;
import java.util.Map;

/**
 * The image and token parity goldens of {@code scripts/golden/make_golden.py} ({@link
 * GoldenSet#PARITY}), generated at test time with the real Hugging Face processors into {@code
 * target/parity-goldens/} once per build (again when the script is newer than them; about 85 s,
 * byte-identical from run to run). The video goldens are {@link GoldenSet#VIDEO}.
 */
final class Goldens {
    private Goldens() {}

    /**
     * All rows of the golden {@code name} of {@link GoldenSet#PARITY}.
     *
     * @throws IllegalStateException when the model venv is missing or the script fails, with its
     *     output
     */
    static List<Map<String, Object>> read(String name) {
        return GoldenSet.PARITY.read(name);
    }

    /** An int32 list column as an array. */
    static long[] longs(Object list) {
        return GoldenSet.longs(list);
    }
}

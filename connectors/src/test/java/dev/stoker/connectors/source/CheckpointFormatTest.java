package dev.stoker.connectors.source;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.TreeSet;
import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.junit.jupiter.api.Test;

/**
 * The source's savepoint format: {@link StepSplitSerializer} and {@link
 * StepEnumeratorState.Serializer} round-trip, reject another version naming both, reject truncated
 * bytes and bytes after the fields, and restore the frozen bytes of each released version ({@code
 * src/test/resources/checkpoint-formats}, written from the documented layout, not by these
 * serializers).
 */
class CheckpointFormatTest {
    private static final String GENERATION = "20261202-132813-623fa3";

    private static byte[] fixture(String name) throws IOException {
        try (InputStream in =
                CheckpointFormatTest.class.getResourceAsStream("/checkpoint-formats/" + name)) {
            assertThat(in).as("fixture %s", name).isNotNull();
            return HexFormat.of()
                    .parseHex(new String(in.readAllBytes(), StandardCharsets.US_ASCII).strip());
        }
    }

    /** {@code value} serialized and read back at the serializer's current version. */
    private static <T> T roundTrip(SimpleVersionedSerializer<T> serializer, T value)
            throws IOException {
        return serializer.deserialize(serializer.getVersion(), serializer.serialize(value));
    }

    private static String describe(StepSplit s) {
        return s.generation + "/" + s.step + "/" + s.elementsEmitted;
    }

    private static String describe(StepEnumeratorState s) {
        return s.generation + "/" + s.nextStep + "/" + s.returnedSteps;
    }

    @Test
    void stepSplitsRoundTrip() throws IOException {
        for (StepSplit split :
                List.of(
                        new StepSplit(GENERATION, 0, 0),
                        new StepSplit(GENERATION, Long.MAX_VALUE, Integer.MAX_VALUE),
                        new StepSplit("", 7, 5),
                        new StepSplit("gén-ü\u0000-日本", 123_456_789_012L, 1))) {
            assertThat(describe(roundTrip(StepSplitSerializer.INSTANCE, split)))
                    .isEqualTo(describe(split));
        }
    }

    @Test
    void theFrozenStepSplitOfVersion1Restores() throws IOException {
        byte[] frozen = fixture("step-split-v1.hex");
        StepSplit split = StepSplitSerializer.INSTANCE.deserialize(1, frozen);
        assertThat(describe(split)).isEqualTo(GENERATION + "/41/3");
        assertThat(StepSplitSerializer.INSTANCE.serialize(split))
                .as("version %d still writes the bytes of version 1", StepSplitSerializer.VERSION)
                .isEqualTo(frozen);
    }

    @Test
    void aStepSplitOfAnotherVersionIsRejectedNamingBoth() throws IOException {
        byte[] bytes = StepSplitSerializer.INSTANCE.serialize(new StepSplit(GENERATION, 1, 0));
        assertThatThrownBy(() -> StepSplitSerializer.INSTANCE.deserialize(2, bytes))
                .isInstanceOf(IOException.class)
                .hasMessageContaining("StepSplit checkpoint format version 2")
                .hasMessageContaining("reads version 1");
    }

    @Test
    void aStepSplitWithBytesAfterItsFieldsOrTruncatedIsRejected() throws IOException {
        byte[] frozen = fixture("step-split-v1.hex");
        byte[] longer = Arrays.copyOf(frozen, frozen.length + 4);
        assertThatThrownBy(() -> StepSplitSerializer.INSTANCE.deserialize(1, longer))
                .isInstanceOf(IOException.class)
                .hasMessageContaining("has 4 bytes after its fields");
        byte[] shorter = Arrays.copyOf(frozen, frozen.length - 1);
        assertThatThrownBy(() -> StepSplitSerializer.INSTANCE.deserialize(1, shorter))
                .isInstanceOf(IOException.class);
    }

    @Test
    void enumeratorStatesRoundTrip() throws IOException {
        for (StepEnumeratorState state :
                List.of(
                        new StepEnumeratorState(GENERATION, 0, new TreeSet<>()),
                        new StepEnumeratorState(GENERATION, 99, new TreeSet<>(List.of(98L, 3L))),
                        new StepEnumeratorState(
                                "gén-日本", Long.MAX_VALUE, new TreeSet<>(List.of(0L))))) {
            assertThat(describe(roundTrip(StepEnumeratorState.Serializer.INSTANCE, state)))
                    .isEqualTo(describe(state));
        }
    }

    @Test
    void theFrozenEnumeratorStateOfVersion1Restores() throws IOException {
        byte[] frozen = fixture("step-enumerator-state-v1.hex");
        StepEnumeratorState state = StepEnumeratorState.Serializer.INSTANCE.deserialize(1, frozen);
        assertThat(describe(state)).isEqualTo(GENERATION + "/17/[3, 9]");
        assertThat(StepEnumeratorState.Serializer.INSTANCE.serialize(state))
                .as(
                        "version %d still writes the bytes of version 1",
                        StepEnumeratorState.Serializer.VERSION)
                .isEqualTo(frozen);
    }

    @Test
    void anEnumeratorStateOfAnotherVersionIsRejectedNamingBoth() {
        assertThatThrownBy(
                        () ->
                                StepEnumeratorState.Serializer.INSTANCE.deserialize(
                                        3, fixture("step-enumerator-state-v1.hex")))
                .isInstanceOf(IOException.class)
                .hasMessageContaining("StepEnumeratorState checkpoint format version 3")
                .hasMessageContaining("reads version 1");
    }

    @Test
    void anEnumeratorStateWithBytesAfterItsFieldsTruncatedOrANegativeCountIsRejected()
            throws IOException {
        byte[] frozen = fixture("step-enumerator-state-v1.hex");
        byte[] longer = Arrays.copyOf(frozen, frozen.length + 8);
        assertThatThrownBy(() -> StepEnumeratorState.Serializer.INSTANCE.deserialize(1, longer))
                .isInstanceOf(IOException.class)
                .hasMessageContaining("has 8 bytes after its fields");
        byte[] shorter = Arrays.copyOf(frozen, frozen.length - 8);
        assertThatThrownBy(() -> StepEnumeratorState.Serializer.INSTANCE.deserialize(1, shorter))
                .isInstanceOf(IOException.class);
        byte[] negative = frozen.clone();
        int count = 2 + GENERATION.length() + 8; // the count's first byte
        assertThat(negative[count + 3]).isEqualTo((byte) 2);
        negative[count] = (byte) 0xff;
        assertThatThrownBy(() -> StepEnumeratorState.Serializer.INSTANCE.deserialize(1, negative))
                .isInstanceOf(IOException.class)
                .hasMessageContaining("negative count");
    }
}

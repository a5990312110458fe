package dev.stoker.operators.image;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.operators.SharedData;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import java.io.IOException;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class SmartResizeTest {
    private static final String[][] SETTINGS = {
        {"f28_default", "28", "3136", "12845056"},
        {"f28_max1280tok", "28", "3136", "1003520"},
        {"f32_qwen3vl", "32", "65536", "16777216"},
    };

    @Test
    void matchesEveryRowOfTheReferenceTableForAllThreeSettings() throws Exception {
        List<JsonNode> rows = referenceRows();
        assertThat(rows).hasSize(51);
        int checked = 0;
        for (JsonNode row : rows) {
            int w = row.get("width_after_exif").asInt();
            int h = row.get("height_after_exif").asInt();
            for (String[] s : SETTINGS) {
                JsonNode expected = row.get(s[0]);
                int factor = Integer.parseInt(s[1]);
                int[] hw =
                        SmartResize.compute(
                                h, w, factor, Long.parseLong(s[2]), Long.parseLong(s[3]));
                String what = row.get("path").asText() + " " + s[0];
                assertThat(hw[0]).as(what + " h").isEqualTo(expected.get("h").asInt());
                assertThat(hw[1]).as(what + " w").isEqualTo(expected.get("w").asInt());
                assertThat((hw[0] / factor) * (hw[1] / factor))
                        .as(what + " tokens")
                        .isEqualTo(expected.get("merged_tokens").asInt());
                checked++;
            }
        }
        assertThat(checked).isEqualTo(153);
    }

    @Test
    void tinyImagesScaleUpToMinPixels() throws Exception {
        assertThat(SmartResize.compute(10, 10, 28, 3136, 12845056)).containsExactly(56, 56);
        assertThat(SmartResize.compute(1, 1, 28, 3136, 12845056)).containsExactly(56, 56);
        assertThat(SmartResize.compute(27, 300, 28, 3136, 12845056)).containsExactly(28, 308);
        assertThat(SmartResize.compute(300, 27, 28, 3136, 12845056)).containsExactly(308, 28);
    }

    @Test
    void hugeImageIsFlooredUnderMaxPixels() throws Exception {
        // 12845056 = 3584^2, so beta = 100000 / 3584 and each side floors to 3584 = 128 * 28
        int[] hw = SmartResize.compute(100000, 100000, 28, 3136, 12845056);
        assertThat(hw).containsExactly(3584, 3584);
        assertThat((long) hw[0] * hw[1]).isLessThanOrEqualTo(12845056L);
    }

    @Test
    void roundsHalfToEven() throws Exception {
        // 42 / 28 = 1.5 -> 2 (even), 70 / 28 = 2.5 -> 2 (even), 98 / 28 = 3.5 -> 4
        assertThat(SmartResize.compute(42, 98, 28, 0, Long.MAX_VALUE)).containsExactly(56, 112);
        assertThat(SmartResize.compute(70, 70, 28, 0, Long.MAX_VALUE)).containsExactly(56, 56);
    }

    @Test
    void aspectRatioOfExactly200IsAccepted() throws Exception {
        // 2000 / 28 = 71.43 -> 71 * 28 = 1988; area 55664 lies within the bounds
        assertThat(SmartResize.compute(10, 2000, 28, 3136, 12845056)).containsExactly(28, 1988);
    }

    @Test
    void aspectRatioAbove200IsRejectedWithTheRatio() {
        assertThatThrownBy(() -> SmartResize.compute(10, 2010, 28, 3136, 12845056))
                .isInstanceOf(RejectedRecordException.class)
                .hasMessageContaining("aspect ratio 201.0 > 200")
                .extracting(e -> ((RejectedRecordException) e).reason())
                .isEqualTo(RejectReason.EXTREME_ASPECT_RATIO);
        assertThatThrownBy(() -> SmartResize.compute(2100, 10, 28, 3136, 12845056))
                .hasMessageContaining("aspect ratio 210.0 > 200");
    }

    @Test
    void extremeAspectReadmeCases() throws Exception {
        assertThat(SmartResize.compute(2800, 14, 28, 3136, 12845056)).containsExactly(2800, 28);
        assertThat(SmartResize.compute(14, 2800, 28, 3136, 12845056)).containsExactly(28, 2800);
        assertThat(SmartResize.compute(15420, 690, 28, 3136, 1003520)).containsExactly(4732, 196);
        assertThat(SmartResize.compute(15420, 690, 28, 3136, 12845056)).containsExactly(15428, 700);
        assertThat(SmartResize.compute(21, 4000, 28, 3136, 12845056)).containsExactly(28, 4004);
    }

    private static List<JsonNode> referenceRows() throws IOException {
        ObjectMapper mapper = new ObjectMapper();
        List<JsonNode> rows = new ArrayList<>();
        for (String line : Files.readAllLines(SharedData.path("smart_resize_reference.jsonl"))) {
            if (!line.isBlank()) {
                rows.add(mapper.readTree(line));
            }
        }
        return rows;
    }
}

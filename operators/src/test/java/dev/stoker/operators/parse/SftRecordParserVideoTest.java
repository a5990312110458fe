package dev.stoker.operators.parse;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.stoker.operators.model.JsonlLine;
import dev.stoker.operators.model.RecordRef;
import dev.stoker.operators.model.RejectReason;
import dev.stoker.operators.model.RejectedRecordException;
import dev.stoker.operators.model.SftRecord;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/** Video parts in the three record formats (issue 36). */
class SftRecordParserVideoTest {
    private static final String ANSWER = "{\"role\": \"assistant\", \"content\": \"Yo\"}";

    private final SftRecordParser parser = new SftRecordParser();

    @Test
    void messagesVideoPartWithItsOwnFpsAndPixelBoundsBesideAnImage() throws Exception {
        SftRecord r =
                parse(
                        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Compare \"},"
                                + " {\"type\": \"video\", \"video\": \"clips/a.mp4\", \"fps\": 1.5, \"min_pixels\": 3136,"
                                + " \"max_pixels\": 50176}, {\"image\": \"b.jpg\"}, {\"video\": \"clips/c.webm\"}]}, "
                                + ANSWER
                                + "]}",
                        RecordFormat.MESSAGES);
        assertThat(r.messages[0].content)
                .extracting(p -> p.type)
                .containsExactly("text", "video", "image", "video");
        assertThat(r.messages[0].content)
                .extracting(p -> p.videoIndex)
                .containsExactly(-1, 0, -1, 1);
        assertThat(r.messages[0].content[2].imageIndex).isZero();
        assertThat(r.images).extracting(i -> i.path).containsExactly("b.jpg");
        assertThat(r.videos).extracting(v -> v.path).containsExactly("clips/a.mp4", "clips/c.webm");
        assertThat(r.videos[0].fps).isEqualTo(1.5);
        assertThat(r.videos[0].minPixels).isEqualTo(3136);
        assertThat(r.videos[0].maxPixels).isEqualTo(50176);
        assertThat(r.videos[1].fps).isZero();
        assertThat(r.videos[1].maxPixels).isZero();
    }

    @Test
    void llavaVideoPlaceholderBesideAnImagePlaceholder() throws Exception {
        SftRecord r =
                parse(
                        "{\"image\": \"a.jpg\", \"video\": \"v.mp4\", \"conversations\": [{\"from\": \"human\","
                                + " \"value\": \"<video>\\nand <image>\\nSame?\"}, {\"from\": \"gpt\", \"value\": \"No\"}]}",
                        RecordFormat.LLAVA);
        assertThat(r.messages[0].content)
                .extracting(p -> p.type)
                .containsExactly("video", "text", "image", "text");
        assertThat(r.videos).extracting(v -> v.path).containsExactly("v.mp4");
        assertThat(r.images).extracting(i -> i.path).containsExactly("a.jpg");
    }

    /** LLaVA-Video-178K: a top-level video, no image, and {@code <image>} in the text for it. */
    @Test
    void llavaVideoRecordWhoseImagePlaceholderStandsForTheVideo() throws Exception {
        SftRecord r =
                parse(
                        "{\"id\": \"v1\", \"video\": \"academic/x.mp4\", \"conversations\": [{\"from\": \"human\","
                                + " \"value\": \"<image>\\nWhat happens?\"}, {\"from\": \"gpt\", \"value\": \"A cat.\"}]}",
                        RecordFormat.AUTO);
        assertThat(r.images).isEmpty();
        assertThat(r.videos).extracting(v -> v.path).containsExactly("academic/x.mp4");
        assertThat(r.messages[0].content).extracting(p -> p.type).containsExactly("video", "text");
        assertThat(r.messages[0].content[1].text).isEqualTo("\nWhat happens?");
    }

    @Test
    void shareGptVideosListWithPlaceholdersInOrder() throws Exception {
        SftRecord r =
                parse(
                        "{\"messages\": [{\"role\": \"user\", \"content\": \"<video><image><video>Which?\"}, "
                                + ANSWER
                                + "], \"videos\": [\"a.mp4\", \"b.mov\"], \"images\": [\"c.png\"]}",
                        RecordFormat.SHAREGPT);
        assertThat(r.messages[0].content)
                .extracting(p -> p.type)
                .containsExactly("video", "image", "video", "text");
        assertThat(r.videos).extracting(v -> v.path).containsExactly("a.mp4", "b.mov");
        assertThat(r.messages[0].content)
                .extracting(p -> p.videoIndex)
                .containsExactly(0, -1, 1, -1);
    }

    @ParameterizedTest(name = "{0}")
    @CsvSource(
            delimiter = '|',
            value = {
                "sharegpt: two placeholders, one video|{\"messages\": [{\"role\": \"user\", \"content\": \"<video><video>Hi\"}, "
                        + ANSWER
                        + "], \"videos\": [\"a.mp4\"]}|2 placeholders vs 1 videos (each <video> in the text needs exactly one entry in the video list)",
                "llava: a video and an image, no video placeholder|{\"image\": \"a.jpg\", \"video\": \"v.mp4\", \"conversations\": [{\"from\": \"human\", \"value\": \"<image>Hi\"}, {\"from\": \"gpt\", \"value\": \"Yo\"}]}|0 placeholders vs 1 videos",
                "llava-video: two <image> for one video|{\"video\": \"v.mp4\", \"conversations\": [{\"from\": \"human\", \"value\": \"<image><image>Hi\"}, {\"from\": \"gpt\", \"value\": \"Yo\"}]}|2 placeholders vs 1 videos (each <image> (standing for the video: the record has no image) in the text",
                "video in an answer|{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"<video>Yo\"}], \"videos\": [\"a.mp4\"]}|video in assistant turn 2 (videos are only allowed in user turns)",
                "video part without a path|{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\", \"video\": \"\"}]}, "
                        + ANSWER
                        + "]}|video part without source"
            })
    void countMismatchesAreNamed(String name, String json, String message) {
        assertRejected(json, RejectReason.PLACEHOLDER_MISMATCH, message);
    }

    @ParameterizedTest(name = "{0}")
    @CsvSource(
            delimiter = '|',
            value = {
                "no frames in a part|{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\", \"video\": []}]}, "
                        + ANSWER
                        + "]}|messages[0] (turn 1) content[0] 'video': a video given as a list of frame images has no frames",
                "no frames in a videos list|{\"messages\": [{\"role\": \"user\", \"content\": \"<video>Hi\"}, "
                        + ANSWER
                        + "], \"videos\": [[]]}|'videos'[0]: a video given as a list of frame images has no frames",
                "a number among the frames of a part|{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\", \"video\": [\"f1.jpg\", 2]}]}, "
                        + ANSWER
                        + "]}|messages[0] (turn 1) content[0] 'video'[1] must be a string path to a frame image (the video is given as a list of frame images), got number",
                "a nested list among the frames|{\"messages\": [{\"role\": \"user\", \"content\": \"<video>Hi\"}, "
                        + ANSWER
                        + "], \"videos\": [\"a.mp4\", [\"f1.jpg\", [\"f2.jpg\"]]]}|'videos'[1][1] must be a string path to a frame image (the video is given as a list of frame images), got array",
                "a null frame in a llava video list|{\"video\": [[null]], \"conversations\": [{\"from\": \"human\", \"value\": \"<video>Hi\"}, {\"from\": \"gpt\", \"value\": \"Yo\"}]}|'video'[0][0] must be a string path to a frame image (the video is given as a list of frame images), got null",
                "nframes beside frames|{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\", \"video\": [\"f1.jpg\"], \"nframes\": 8}]}, "
                        + ANSWER
                        + "]}|the video part's 'nframes' is not supported",
                "nframes|{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\", \"video\": \"a.mp4\", \"nframes\": 8}]}, "
                        + ANSWER
                        + "]}|the video part's 'nframes' is not supported",
                "fps 0|{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\", \"video\": \"a.mp4\", \"fps\": 0}]}, "
                        + ANSWER
                        + "]}|'fps' must be a positive number, got 0",
                "messages with a top-level videos list|{\"messages\": [{\"role\": \"user\", \"content\": \"<video>Hi\"}, "
                        + ANSWER
                        + "], \"videos\": [\"a.mp4\"]}|it has a top-level 'videos' for <video> placeholders"
            })
    void unsupportedVideoFormsAreRefusedWithTheReason(String name, String json, String message) {
        JsonlLine line = line(json);
        RecordFormat format =
                name.startsWith("messages with") ? RecordFormat.MESSAGES : RecordFormat.AUTO;
        assertThatThrownBy(() -> parser.parse(line, format))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.INVALID_RECORD))
                .hasMessageContaining(message);
    }

    /**
     * A Qwen messages video part given as frame images (as transformers' {@code
     * apply_chat_template} and qwen-vl-utils accept it): one video, its frames in order, its {@code
     * fps} the frames' rate and its pixel bounds kept.
     */
    @Test
    void messagesVideoPartGivenAsFrameImages() throws Exception {
        SftRecord r =
                parse(
                        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\", \"video\":"
                                + " [\"frames/0002.jpg\", \"frames/0001.jpg\", \"./frames/x/../0003.png\"], \"fps\": 1,"
                                + " \"max_pixels\": 50176}, {\"type\": \"text\", \"text\": \"What happens?\"},"
                                + " {\"video\": \"clips/c.mp4\"}]}, "
                                + ANSWER
                                + "]}",
                        RecordFormat.MESSAGES);
        assertThat(r.messages[0].content)
                .extracting(p -> p.type)
                .containsExactly("video", "text", "video");
        assertThat(r.messages[0].content).extracting(p -> p.videoIndex).containsExactly(0, -1, 1);
        assertThat(r.videos).hasSize(2);
        assertThat(r.videos[0].givenAsFrames()).isTrue();
        assertThat(r.videos[0].path).isNull();
        assertThat(r.videos[0].frames)
                .containsExactly("frames/0002.jpg", "frames/0001.jpg", "./frames/x/../0003.png");
        assertThat(r.videos[0].fps).isEqualTo(1.0);
        assertThat(r.videos[0].maxPixels).isEqualTo(50176);
        assertThat(r.videos[0].name())
                .isEqualTo("3 frames 'frames/0002.jpg' .. './frames/x/../0003.png'");
        assertThat(r.videos[1].givenAsFrames()).isFalse();
        assertThat(r.videos[1].path).isEqualTo("clips/c.mp4");
        assertThat(r.images).isEmpty();
    }

    /**
     * qwen-vl-utils reads a frame list's rate from {@code sample_fps}: Stoker too; with {@code fps}
     * of another value the record is refused; a video file's {@code sample_fps} is ignored, as
     * qwen-vl-utils ignores it.
     */
    @Test
    void aFrameListsSampleFpsIsItsRate() throws Exception {
        String frames = "{\"type\": \"video\", \"video\": [\"f/1.jpg\", \"f/2.jpg\"]";
        String file = "{\"type\": \"video\", \"video\": \"c.mp4\"";
        String tail = "}, {\"type\": \"text\", \"text\": \"Hi\"}]}, " + ANSWER + "]}";
        String head = "{\"messages\": [{\"role\": \"user\", \"content\": [";
        assertThat(
                        parse(head + frames + ", \"sample_fps\": 4" + tail, RecordFormat.MESSAGES)
                                .videos[0]
                                .fps)
                .isEqualTo(4.0);
        assertThat(
                        parse(
                                        head + frames + ", \"sample_fps\": 4, \"fps\": 4" + tail,
                                        RecordFormat.MESSAGES)
                                .videos[0]
                                .fps)
                .isEqualTo(4.0);
        assertThatThrownBy(
                        () ->
                                parse(
                                        head + frames + ", \"sample_fps\": 4, \"fps\": 2" + tail,
                                        RecordFormat.MESSAGES))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> assertThat(e.reason()).isEqualTo(RejectReason.INVALID_RECORD))
                .hasMessageContaining("two rates");
        assertThat(
                        parse(head + file + ", \"sample_fps\": 4" + tail, RecordFormat.MESSAGES)
                                .videos[0]
                                .fps)
                .isZero();
    }

    /**
     * ShareGPT / LLaMA-Factory and LLaVA: a {@code videos} entry that is a list of frame paths is
     * one video, beside video files, each matched to its placeholder in order.
     */
    @Test
    void videosListEntriesGivenAsFrameImagesInShareGptAndLlava() throws Exception {
        SftRecord share =
                parse(
                        "{\"messages\": [{\"role\": \"user\", \"content\": \"<video>then<video>Hi\"}, "
                                + ANSWER
                                + "], \"videos\": [[\"f/1.jpg\"], \"b.mp4\"]}",
                        RecordFormat.SHAREGPT);
        assertThat(share.videos).extracting(v -> v.path).containsExactly(null, "b.mp4");
        assertThat(share.videos[0].frames).containsExactly("f/1.jpg");
        assertThat(share.videos[0].name()).isEqualTo("1 frame 'f/1.jpg'");
        assertThat(share.messages[0].content)
                .extracting(p -> p.videoIndex)
                .containsExactly(0, -1, 1, -1);

        SftRecord llava =
                parse(
                        "{\"videos\": [[\"f/1.jpg\", \"f/2.jpg\"]], \"conversations\": [{\"from\": \"human\","
                                + " \"value\": \"<image>\\nWhat?\"}, {\"from\": \"gpt\", \"value\": \"Yo\"}]}",
                        RecordFormat.LLAVA);
        assertThat(llava.videos).hasSize(1);
        assertThat(llava.videos[0].frames).containsExactly("f/1.jpg", "f/2.jpg");
        assertThat(llava.messages[0].content[0].isVideo()).isTrue();
    }

    /** A frame path is checked as an image path: the same root and the same rules. */
    @ParameterizedTest
    @ValueSource(strings = {"/etc/x.jpg", "../x.jpg", "a/../../x.jpg", "s3://bucket/x.jpg"})
    void unsafeFramePathsAreRejectedInEveryFormat(String path) {
        String quoted = "[\"ok.jpg\", \"" + path + "\"]";
        for (String json :
                List.of(
                        "{\"video\": ["
                                + quoted
                                + "], \"conversations\": [{\"from\": \"human\", \"value\": \"<video>Hi\"}, {\"from\": \"gpt\", \"value\": \"Yo\"}]}",
                        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\", \"video\": "
                                + quoted
                                + "}]}, "
                                + ANSWER
                                + "]}",
                        "{\"messages\": [{\"role\": \"user\", \"content\": \"<video>Hi\"}, "
                                + ANSWER
                                + "], \"videos\": ["
                                + quoted
                                + "]}")) {
            assertRejected(json, RejectReason.UNSAFE_PATH, "[1]: image path '" + path + "'");
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"/etc/x.mp4", "../x.mp4", "s3://bucket/x.mp4", "file:///x.mp4"})
    void unsafeVideoPathsAreRejectedInEveryFormat(String path) {
        String quoted = "\"" + path + "\"";
        for (String json :
                List.of(
                        "{\"video\": "
                                + quoted
                                + ", \"conversations\": [{\"from\": \"human\", \"value\": \"<video>Hi\"}, {\"from\": \"gpt\", \"value\": \"Yo\"}]}",
                        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"video\", \"video\": "
                                + quoted
                                + "}]}, "
                                + ANSWER
                                + "]}",
                        "{\"messages\": [{\"role\": \"user\", \"content\": \"<video>Hi\"}, "
                                + ANSWER
                                + "], \"videos\": ["
                                + quoted
                                + "]}")) {
            assertRejected(json, RejectReason.UNSAFE_PATH, "video path '" + path + "'");
        }
    }

    private SftRecord parse(String json, RecordFormat format) throws Exception {
        SftRecord record = parser.parse(line(json), format);
        assertThat(parser.parse(line(json), RecordFormat.AUTO))
                .usingRecursiveComparison()
                .isEqualTo(record);
        return record;
    }

    private void assertRejected(String json, RejectReason reason, String fragment) {
        assertThatThrownBy(() -> parser.parse(line(json), RecordFormat.AUTO))
                .isInstanceOfSatisfying(
                        RejectedRecordException.class,
                        e -> {
                            assertThat(e.reason()).isEqualTo(reason);
                            assertThat(e.getMessage()).contains(fragment);
                        });
    }

    private static JsonlLine line(String json) {
        byte[] bytes = json.getBytes(StandardCharsets.UTF_8);
        return new JsonlLine(new RecordRef("test.jsonl", 1, 0, null), bytes, bytes.length);
    }
}

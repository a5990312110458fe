package dev.stoker.operators.tokenize;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link ChatTokenizer#shared} and {@link ChatTokenizer#loadShared}: one loaded tokenizer per
 * {@code tokenizer.json} while any handle holds it, released by the last close, safe to encode with
 * from many threads.
 */
class SharedTokenizerTest {
    @AfterEach
    void nothingHeld() {
        assertThat(ChatTokenizer.sharedCount()).as("shared tokenizers left held").isZero();
    }

    /**
     * A small WordLevel tokenizer.json with Qwen's special tokens and {@code words} at 7, 8, ...
     */
    private static Path smallTokenizer(Path dir, String... words) throws Exception {
        StringBuilder vocab = new StringBuilder("\"[UNK]\": 1");
        for (int i = 0; i < words.length; i++) {
            vocab.append(", \"").append(words[i]).append("\": ").append(7 + i);
        }
        Files.writeString(
                dir.resolve("tokenizer.json"),
                """
                {"version": "1.0", "truncation": null, "padding": null, "normalizer": null,
                 "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
                 "added_tokens": [%s {"id": 2, "content": "<think>", "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": false}],
                 "model": {"type": "WordLevel", "vocab": {%s, "<think>": 2}, "unk_token": "[UNK]"}}
                """
                        .formatted(ChatTokenizerTest.qwenSpecialTokens(), vocab));
        return dir;
    }

    @Test
    void handlesOfOneFileShareOneLoadUntilTheLastIsClosed(@TempDir Path dir) throws Exception {
        smallTokenizer(dir, "hello", "world");
        ChatTokenizer a = ChatTokenizer.shared(dir);
        ChatTokenizer b =
                ChatTokenizer.shared(dir.resolve(".").resolve("..").resolve(dir.getFileName()));
        assertThat(ChatTokenizer.sharedCount()).isEqualTo(1);
        a.close();
        a.close(); // a second close does not release b's claim
        assertThat(ChatTokenizer.sharedCount()).isEqualTo(1);
        assertThat(b.encodeText("hello world")).containsExactly(7, 8);
        b.close();
        assertThat(ChatTokenizer.sharedCount()).isZero();
        try (ChatTokenizer c = ChatTokenizer.shared(dir)) { // loaded anew
            assertThat(c.encodeText("world hello")).containsExactly(8, 7);
        }
    }

    /**
     * A second handle on an unchanged file (same real path, size and modification time) gets the
     * tokenizer loaded for the first, not a load of its own: the file's words are swapped in place
     * (same length) and its time set back, and the second handle still encodes with the first
     * load's vocabulary.
     */
    @Test
    void aSecondHandleGetsTheFirstLoadNotANewOne(@TempDir Path dir) throws Exception {
        smallTokenizer(dir, "hello", "world");
        Path file = dir.resolve("tokenizer.json");
        FileTime loaded = Files.getLastModifiedTime(file);
        try (ChatTokenizer first = ChatTokenizer.shared(dir)) {
            smallTokenizer(dir, "world", "hello"); // the same bytes but for the order
            Files.setLastModifiedTime(file, loaded);
            try (ChatTokenizer second = ChatTokenizer.shared(dir)) {
                assertThat(second.encodeText("hello")).containsExactly(7);
            }
        }
        try (ChatTokenizer fresh = ChatTokenizer.shared(dir)) { // nothing held: the file as it is
            assertThat(fresh.encodeText("hello")).containsExactly(8);
        }
    }

    /** The last release closes the native tokenizer: a handle used after it fails. */
    @Test
    void theLastReleaseClosesTheTokenizer(@TempDir Path dir) throws Exception {
        smallTokenizer(dir, "hello");
        ChatTokenizer a = ChatTokenizer.shared(dir);
        ChatTokenizer b = ChatTokenizer.shared(dir);
        b.close();
        assertThat(a.encodeText("hello")).containsExactly(7); // a still holds it
        a.close();
        assertThatThrownBy(() -> a.encodeText("hello")).isInstanceOf(IllegalStateException.class);
    }

    /** A caller that gives up its future before the handle comes (cancels it) holds nothing. */
    @Test
    void aCancelledClaimIsReleased(@TempDir Path dir) throws Exception {
        smallTokenizer(dir, "hello");
        ChatTokenizer.loadShared(dir).cancel(false);
        CompletableFuture<ChatTokenizer> kept = ChatTokenizer.loadShared(dir);
        kept.join().close();
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (ChatTokenizer.sharedCount() > 0 && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        assertThat(ChatTokenizer.sharedCount()).isZero();
    }

    /** {@link ChatTokenizer#sharedIfHeld}: nothing when nothing holds it, the held one else. */
    @Test
    void sharedIfHeldLoadsNothingByItself(@TempDir Path dir) throws Exception {
        smallTokenizer(dir, "hello");
        assertThat(ChatTokenizer.sharedIfHeld(dir)).isNull();
        assertThat(ChatTokenizer.sharedCount()).isZero();
        try (ChatTokenizer held = ChatTokenizer.shared(dir);
                ChatTokenizer second = ChatTokenizer.sharedIfHeld(dir)) {
            assertThat(second).isNotNull();
            assertThat(second.encodeText("hello")).containsExactly(7);
            assertThat(ChatTokenizer.sharedCount()).isEqualTo(1);
        }
    }

    @Test
    void aChangedFileIsLoadedAnew(@TempDir Path dir) throws Exception {
        smallTokenizer(dir, "hello", "world");
        try (ChatTokenizer before = ChatTokenizer.shared(dir)) {
            smallTokenizer(dir, "world", "hello");
            Files.setLastModifiedTime(
                    dir.resolve("tokenizer.json"),
                    FileTime.fromMillis(System.currentTimeMillis() + 60_000));
            try (ChatTokenizer after = ChatTokenizer.shared(dir)) {
                assertThat(ChatTokenizer.sharedCount()).isEqualTo(2);
                assertThat(before.encodeText("hello")).containsExactly(7);
                assertThat(after.encodeText("hello")).containsExactly(8);
            }
        }
    }

    @Test
    void callersWhileItIsHeldOrLoadingClaimTheSameOne(@TempDir Path dir) throws Exception {
        smallTokenizer(dir, "hello");
        List<CompletableFuture<ChatTokenizer>> loads = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            loads.add(ChatTokenizer.loadShared(dir));
        }
        assertThat(ChatTokenizer.sharedCount()).isEqualTo(1);
        for (CompletableFuture<ChatTokenizer> load : loads) {
            try (ChatTokenizer t = load.join()) {
                assertThat(t.encodeText("hello")).containsExactly(7);
            }
        }
    }

    @Test
    void aFailedLoadHoldsNothingAndTheNextCallTriesAgain(@TempDir Path dir) throws Exception {
        assertThatThrownBy(() -> ChatTokenizer.shared(dir)).isInstanceOf(NoSuchFileException.class);
        Files.writeString(dir.resolve("tokenizer.json"), "{\"added_tokens\": []}");
        CompletableFuture<ChatTokenizer> first = ChatTokenizer.loadShared(dir);
        CompletableFuture<ChatTokenizer> second = ChatTokenizer.loadShared(dir);
        assertThatThrownBy(first::join).hasCauseInstanceOf(IllegalStateException.class);
        assertThatThrownBy(() -> ChatTokenizer.shared(dir))
                .isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("not a Qwen2-VL compatible tokenizer");
        assertThatThrownBy(second::join).hasCauseInstanceOf(IllegalStateException.class);
        assertThat(ChatTokenizer.sharedCount()).isZero();
        smallTokenizer(dir, "hello");
        Files.setLastModifiedTime(
                dir.resolve("tokenizer.json"),
                FileTime.fromMillis(System.currentTimeMillis() + 60_000));
        try (ChatTokenizer fixed = ChatTokenizer.shared(dir)) {
            assertThat(fixed.encodeText("hello")).containsExactly(7);
        }
    }

    /**
     * Qwen's tokenizer (byte-level BPE with its cache) shared by threads that encode at once gives
     * each text the ids a tokenizer of its own gives it.
     */
    @Test
    void threadsEncodingAtOnceGetWhatAnUnsharedTokenizerGives() throws Exception {
        List<String> texts = new ArrayList<>();
        String[] pieces = {
            "Describe the image.", " 图片里有什么？", "<|im_start|>user", " naïve café ", "🙂👍🏽",
            "\n\n  indented\tcode()", "<think>", "1234567890", " the the the", "Ünïcödé"
        };
        for (int i = 0; i < 400; i++) {
            StringBuilder text = new StringBuilder();
            for (int j = 0; j <= i % 7; j++) {
                text.append(pieces[(i * 31 + j * 7) % pieces.length]).append(i % (j + 2));
            }
            texts.add(text.toString());
        }
        List<long[]> expected = new ArrayList<>();
        try (ChatTokenizer own = ChatTokenizer.open(ChatTokenizerTest.tokenizerDir())) {
            for (String text : texts) {
                expected.add(own.encodeText(text));
            }
        }
        ExecutorService pool = Executors.newFixedThreadPool(4);
        try (ChatTokenizer shared = ChatTokenizer.shared(ChatTokenizerTest.tokenizerDir())) {
            List<Future<List<long[]>>> results = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                int offset = t * 97;
                results.add(
                        pool.submit(
                                () -> {
                                    List<long[]> ids = new ArrayList<>(texts.size());
                                    for (int round = 0; round < 3; round++) {
                                        for (int i = 0; i < texts.size(); i++) {
                                            int k = (i + offset) % texts.size();
                                            long[] got = shared.encodeText(texts.get(k));
                                            if (round == 2) {
                                                ids.add(got);
                                            }
                                            assertThat(got)
                                                    .as("text %d", k)
                                                    .containsExactly(expected.get(k));
                                        }
                                    }
                                    return ids;
                                }));
            }
            for (Future<List<long[]>> result : results) {
                assertThat(result.get()).hasSize(texts.size());
            }
        } finally {
            pool.shutdownNow();
        }
    }
}

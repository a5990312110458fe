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
    void callersWhileItLoadsGetTheSameLoad(@TempDir Path dir) throws Exception {
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

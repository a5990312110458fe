package dev.stoker.operators.tokenize;

import ai.djl.huggingface.tokenizers.HuggingFaceTokenizer;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import dev.stoker.operators.json.Json;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.FileTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A Qwen tokenizer loaded from a Hugging Face {@code tokenizer.json} through the DJL binding, and
 * the encoding of rendered chat turns ({@link TemplateTurn}) into {@code input_ids} and {@code
 * labels}.
 *
 * <p>Special tokens enter {@code input_ids} only as ids the template emits ({@link
 * TemplateTurn.Special}, {@link TemplateTurn.Image}, {@link TemplateTurn.Video}); text (a video's
 * timestamps too) is encoded by {@link #encodeText}, which does not match the special added tokens
 * ({@code "special": true} in {@code tokenizer.json}: {@code <|endoftext|>}, {@code <|im_start|>},
 * {@code <|im_end|>}, the vision and box tokens): their strings in dataset text are encoded as
 * text, as Hugging Face {@code tokenizer(text, add_special_tokens=False,
 * split_special_tokens=True)} does. The non-special added tokens (Qwen3's {@code <think>}, {@code
 * <tool_call>}, ...) are still matched, as Hugging Face matches them in either mode. Truncation is
 * off (DJL otherwise silently truncates to 512 tokens).
 *
 * <p>DJL's binding has no switch for {@code split_special_tokens}, so {@link #open} builds the
 * tokenizer from a copy of {@code tokenizer.json} whose special added tokens are moved into the BPE
 * vocabulary under their ids: nothing matches them as added tokens any more, byte-level BPE never
 * produces them (the pre-tokenizer splits their strings and there are no merges for them), and
 * every other id stays as it was. {@link #open} checks both.
 *
 * <p>No network: before DJL is first used in a JVM this class sets the system properties {@code
 * OPT_OUT_TRACKING=true} (else every {@code HuggingFaceTokenizer.newInstance} asks the EC2 metadata
 * service at 169.254.169.254 for usage telemetry, at most once a day) and {@code
 * ai.djl.offline=true} (else, on a machine with CUDA, DJL downloads a CUDA build of its native
 * library from publish.djl.ai instead of using the CPU one in its jar), unless they are already set
 * (environment variables {@code OPT_OUT_TRACKING} / {@code DJL_OFFLINE} take precedence in DJL).
 *
 * <p>{@link #shared} and {@link #loadShared} give handles on one tokenizer per {@code
 * tokenizer.json} in this JVM (per class loader), loaded once (Qwen's takes ~1 s of CPU and tens of
 * MB): the embedded job's client check and its tokenize subtasks use one load ({@code
 * TokenizeFunction} takes a handle when one is held, {@link #sharedIfHeld}). Encoding is
 * thread-safe (the Hugging Face Rust {@code Tokenizer::encode} takes {@code &self}; each call gets
 * its own native encoding). A handle must not be used after its {@link #close}.
 */
public final class ChatTokenizer implements AutoCloseable {
    static {
        if (System.getProperty("OPT_OUT_TRACKING") == null) {
            System.setProperty("OPT_OUT_TRACKING", "true");
        }
        if (System.getProperty("ai.djl.offline") == null) {
            System.setProperty("ai.djl.offline", "true");
        }
    }

    public static final long ENDOFTEXT = 151643;
    public static final long IM_START = 151644;
    public static final long IM_END = 151645;
    public static final long VISION_START = 151652;
    public static final long VISION_END = 151653;
    public static final long IMAGE_PAD = 151655;
    public static final long VIDEO_PAD = 151656;

    /** Label value of tokens that are not trained (PyTorch's cross-entropy ignore_index). */
    public static final long IGNORE_INDEX = -100;

    private static final Map<String, Long> EXPECTED_IDS =
            Map.of(
                    "<|endoftext|>",
                    ENDOFTEXT,
                    "<|im_start|>",
                    IM_START,
                    "<|im_end|>",
                    IM_END,
                    "<|vision_start|>",
                    VISION_START,
                    "<|vision_end|>",
                    VISION_END,
                    "<|image_pad|>",
                    IMAGE_PAD,
                    "<|video_pad|>",
                    VIDEO_PAD);

    /** The shared tokenizers of this class loader, by {@code tokenizer.json} file. */
    private static final Map<FileKey, Shared> SHARED = new HashMap<>();

    private final HuggingFaceTokenizer tokenizer;

    /** The shared tokenizer this is a handle on; null for one of {@link #open}, which owns it. */
    private final Shared shared;

    private final AtomicBoolean closed = new AtomicBoolean();

    private ChatTokenizer(HuggingFaceTokenizer tokenizer, Shared shared) {
        this.tokenizer = tokenizer;
        this.shared = shared;
    }

    /**
     * A handle on this JVM's shared tokenizer of {@code directory} (see the class comment), waiting
     * for it to load if it is not loaded yet: {@link #loadShared}, waited for. An interrupt while
     * it waits gives up the claim.
     *
     * @throws IOException as {@link #open} (also {@code NoSuchFileException} for a missing {@code
     *     tokenizer.json})
     * @throws IllegalStateException as {@link #open}
     * @throws InterruptedException when interrupted while the tokenizer loads
     * @throws Error as the load threw it (e.g. DJL's native library not loadable)
     */
    public static ChatTokenizer shared(Path directory) throws IOException, InterruptedException {
        CompletableFuture<ChatTokenizer> handle = claim(directory, false);
        try {
            return handle.get();
        } catch (InterruptedException e) {
            handle.cancel(false); // the handle, when it comes, is released at once
            throw e;
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof IOException io) {
                throw io;
            }
            if (cause instanceof RuntimeException runtime) {
                throw runtime;
            }
            if (cause instanceof Error error) {
                throw error;
            }
            throw new IllegalStateException(cause);
        }
    }

    /**
     * A handle on the shared tokenizer of {@code directory} when one is held or loading in this
     * class loader ({@link #shared}); otherwise null, and nothing is loaded.
     *
     * @throws IOException as {@link #open}
     * @throws IllegalStateException as {@link #open}
     * @throws InterruptedException when interrupted while the held tokenizer still loads
     */
    public static ChatTokenizer sharedIfHeld(Path directory)
            throws IOException, InterruptedException {
        FileKey key = FileKey.of(directory.resolve("tokenizer.json"));
        synchronized (SHARED) {
            if (!SHARED.containsKey(key)) {
                return null;
            }
        }
        return shared(directory); // loaded anew if released since: rare, and correct
    }

    /**
     * A handle on this JVM's shared tokenizer of {@code directory}: while any handle on the same
     * {@code tokenizer.json} (its real path, size and modification time) is held or loading in this
     * class loader, every caller gets one on the same loaded tokenizer; otherwise the call loads it
     * ({@link #open}, from the real path) on a new thread, which inherits this caller's context
     * class loader. Closing a handle releases it; the last release closes the tokenizer. A failed
     * load releases every claim on it, and a call after that tries anew. A file replaced by one of
     * the same size and modification time is not noticed.
     *
     * @return completes with the handle, which the caller must close (cancelling the future, or
     *     completing it otherwise, releases the handle instead); or exceptionally with what {@link
     *     #open} throws, or the {@code IOException} of reading the file's attributes
     */
    public static CompletableFuture<ChatTokenizer> loadShared(Path directory) {
        return claim(directory, true);
    }

    /**
     * A claim on the shared tokenizer of {@code directory}: {@link #loadShared}, whose first caller
     * loads it on a new thread ({@code onNewThread}) or on its own thread, as {@link #shared} does.
     */
    private static CompletableFuture<ChatTokenizer> claim(Path directory, boolean onNewThread) {
        FileKey key;
        try {
            key = FileKey.of(directory.resolve("tokenizer.json"));
        } catch (IOException e) {
            return CompletableFuture.failedFuture(e);
        }
        Shared entry;
        boolean first;
        synchronized (SHARED) {
            entry = SHARED.get(key);
            first = entry == null;
            if (first) {
                entry = new Shared(key);
                SHARED.put(key, entry);
            }
            entry.holders++;
        }
        Shared claimed = entry;
        CompletableFuture<ChatTokenizer> handle = new CompletableFuture<>();
        entry.owner.whenComplete(
                (owner, failure) -> {
                    if (failure != null) {
                        release(claimed);
                        handle.completeExceptionally(failure);
                        return;
                    }
                    ChatTokenizer mine = new ChatTokenizer(owner.tokenizer, claimed);
                    if (!handle.complete(mine)) {
                        mine.close(); // cancelled, or completed by the caller
                    }
                });
        if (first && onNewThread) {
            startLoading(entry, directory);
        } else if (first) {
            loadInto(entry, directory);
        }
        return handle;
    }

    /** Loads {@code entry}'s file on this thread; whatever fails completes its load. */
    private static void loadInto(Shared entry, Path directory) {
        try {
            entry.owner.complete(load(entry.key.file(), directory));
        } catch (Throwable e) {
            entry.owner.completeExceptionally(e);
        }
    }

    /** {@link #loadInto} on a new thread; a thread that cannot start completes the load. */
    private static void startLoading(Shared entry, Path directory) {
        try {
            Thread loader = new Thread(() -> loadInto(entry, directory), "stoker-tokenizer-load");
            loader.setDaemon(true);
            loader.start();
        } catch (Throwable e) { // e.g. no native thread left
            entry.owner.completeExceptionally(e);
        }
    }

    /** How many shared tokenizers are held or loading in this class loader. */
    static int sharedCount() {
        synchronized (SHARED) {
            return SHARED.size();
        }
    }

    /** Drops one claim on {@code entry}; the last one closes its tokenizer, if it loaded. */
    private static void release(Shared entry) {
        synchronized (SHARED) {
            if (--entry.holders > 0) {
                return;
            }
            SHARED.remove(entry.key, entry);
        }
        if (entry.owner.isDone() && !entry.owner.isCompletedExceptionally()) {
            entry.owner.join().close();
        }
    }

    /** One shared tokenizer: its load (the instance of {@link #open} that owns it) and claims. */
    private static final class Shared {
        final FileKey key;
        final CompletableFuture<ChatTokenizer> owner = new CompletableFuture<>();
        int holders; // guarded by SHARED

        Shared(FileKey key) {
            this.key = key;
        }
    }

    /** A {@code tokenizer.json} as loaded: its real path, size and modification time. */
    private record FileKey(Path file, long size, FileTime modified) {
        static FileKey of(Path file) throws IOException {
            Path real = file.toRealPath();
            BasicFileAttributes attributes = Files.readAttributes(real, BasicFileAttributes.class);
            return new FileKey(real, attributes.size(), attributes.lastModifiedTime());
        }
    }

    /**
     * Loads {@code tokenizer.json} from {@code directory}, checks the special-token ids and builds
     * the text tokenizer without special-token matching.
     *
     * @throws IOException when the file cannot be read or is not JSON
     * @throws IllegalStateException when a vision or chat token is not a special added token with
     *     its Qwen2-VL id, or when the text tokenizer does not keep the added tokens' ids (a
     *     non-special added token no longer encodes to its id, or a special token's string still
     *     encodes to a special id)
     */
    public static ChatTokenizer open(Path directory) throws IOException {
        return load(directory.resolve("tokenizer.json"), directory);
    }

    /** {@link #open} of {@code file}, named by {@code directory} in messages. */
    private static ChatTokenizer load(Path file, Path directory) throws IOException {
        byte[] json = Files.readAllBytes(file);
        ObjectMapper mapper = Json.mapper();
        Map<String, Long> special = new LinkedHashMap<>();
        Map<String, Long> nonSpecial = new LinkedHashMap<>();
        ArrayNode kept = mapper.createArrayNode();
        for (JsonNode token : addedTokens(mapper, json)) {
            String content = token.path("content").asText();
            long id = token.path("id").asLong(-1);
            if (token.path("special").asBoolean(false)) {
                special.put(content, id);
            } else {
                nonSpecial.put(content, id);
                kept.add(token);
            }
        }
        for (Map.Entry<String, Long> token : EXPECTED_IDS.entrySet()) {
            Long id = special.get(token.getKey());
            if (!token.getValue().equals(id)) {
                throw new IllegalStateException(
                        "tokenizer in "
                                + directory
                                + " has "
                                + token.getKey()
                                + (id == null ? " not as a special token" : " as id " + id)
                                + ", expected special token id "
                                + token.getValue()
                                + "; not a Qwen2-VL compatible tokenizer");
            }
        }
        HuggingFaceTokenizer text =
                HuggingFaceTokenizer.newInstance(
                        new ByteArrayInputStream(
                                withSpecialTokensInVocab(mapper, json, kept, special, directory)),
                        Map.of(
                                "addSpecialTokens", "false",
                                "truncation", "false",
                                "padding", "false",
                                "modelMaxLength", String.valueOf(Integer.MAX_VALUE)));
        ChatTokenizer chat = new ChatTokenizer(text, null);
        try {
            chat.checkAddedTokens(directory, special, nonSpecial);
        } catch (IllegalStateException e) {
            chat.close();
            throw e;
        }
        return chat;
    }

    /**
     * The top-level {@code added_tokens} array of {@code json} (empty if there is none), read with
     * the streaming parser: the rest of the file (~11 MB for Qwen, the vocabulary and merges) is
     * skipped, not built into a tree (which took 0.7-1.0 s per load).
     *
     * @throws IOException if {@code json} is not a JSON object
     */
    private static JsonNode addedTokens(ObjectMapper mapper, byte[] json) throws IOException {
        try (JsonParser in = mapper.createParser(json)) {
            if (in.nextToken() != JsonToken.START_OBJECT) {
                throw new IOException("tokenizer.json is not a JSON object");
            }
            while (in.nextToken() == JsonToken.FIELD_NAME) {
                String name = in.currentName();
                in.nextToken();
                if (name.equals("added_tokens")) {
                    return mapper.readTree(in);
                }
                in.skipChildren();
            }
        }
        return mapper.createArrayNode();
    }

    /**
     * {@code json} with {@code added_tokens} replaced by {@code kept} and the {@code special}
     * tokens put into {@code model.vocab} under their ids (replacing an entry of the same string),
     * copied token by token with the streaming parser and generator.
     *
     * @throws IllegalStateException if there is no {@code model.vocab} object
     */
    private static byte[] withSpecialTokensInVocab(
            ObjectMapper mapper,
            byte[] json,
            ArrayNode kept,
            Map<String, Long> special,
            Path directory)
            throws IOException {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(json.length + 4096);
        boolean vocab = false;
        try (JsonParser in = mapper.createParser(json);
                JsonGenerator out = mapper.createGenerator(bytes)) {
            in.nextToken();
            out.writeStartObject();
            while (in.nextToken() == JsonToken.FIELD_NAME) {
                String name = in.currentName();
                JsonToken value = in.nextToken();
                out.writeFieldName(name);
                if (name.equals("added_tokens")) {
                    in.skipChildren();
                    mapper.writeTree(out, kept);
                } else if (name.equals("model") && value == JsonToken.START_OBJECT) {
                    vocab = copyModel(in, out, special);
                } else {
                    out.copyCurrentStructure(in);
                }
            }
            out.writeEndObject();
        }
        if (!vocab) {
            throw new IllegalStateException(
                    "tokenizer in " + directory + " has no model.vocab object");
        }
        return bytes.toByteArray();
    }

    /**
     * Copies the {@code model} object at {@code in}'s current token, with {@code special} added to
     * its {@code vocab} object; whether it had one.
     */
    private static boolean copyModel(JsonParser in, JsonGenerator out, Map<String, Long> special)
            throws IOException {
        boolean vocab = false;
        out.writeStartObject();
        while (in.nextToken() == JsonToken.FIELD_NAME) {
            String name = in.currentName();
            JsonToken value = in.nextToken();
            out.writeFieldName(name);
            if (!name.equals("vocab") || value != JsonToken.START_OBJECT) {
                out.copyCurrentStructure(in);
                continue;
            }
            vocab = true;
            out.writeStartObject();
            while (in.nextToken() == JsonToken.FIELD_NAME) {
                String token = in.currentName();
                in.nextToken();
                if (special.containsKey(token)) {
                    in.skipChildren(); // replaced by the special token's id below
                } else {
                    out.writeFieldName(token);
                    out.copyCurrentStructure(in);
                }
            }
            for (Map.Entry<String, Long> token : special.entrySet()) {
                out.writeNumberField(token.getKey(), token.getValue());
            }
            out.writeEndObject();
        }
        out.writeEndObject();
        return vocab;
    }

    private void checkAddedTokens(
            Path directory, Map<String, Long> special, Map<String, Long> nonSpecial) {
        for (Map.Entry<String, Long> token : nonSpecial.entrySet()) {
            long[] ids = encodeText(token.getKey());
            if (ids.length != 1 || ids[0] != token.getValue()) {
                throw new IllegalStateException(
                        "text tokenizer built from "
                                + directory
                                + " encodes the added token "
                                + token.getKey()
                                + " as "
                                + Arrays.toString(ids)
                                + ", expected ["
                                + token.getValue()
                                + "]");
            }
        }
        List<Long> specialIds = new ArrayList<>(special.values());
        for (String token : special.keySet()) {
            long[] ids = encodeText(token);
            if (Arrays.stream(ids).anyMatch(id -> specialIds.contains(id))) {
                throw new IllegalStateException(
                        "text tokenizer built from "
                                + directory
                                + " still encodes "
                                + token
                                + " to a special id: "
                                + Arrays.toString(ids));
            }
        }
    }

    /**
     * Token ids of {@code text} with special-token strings encoded as text: Hugging Face {@code
     * tokenizer(text, add_special_tokens=False, split_special_tokens=True)}, no truncation.
     */
    public long[] encodeText(String text) {
        return tokenizer.encode(text, false, false).getIds();
    }

    /** The text padding token id ({@code <|endoftext|>}, 151643). */
    public long padTokenId() {
        return ENDOFTEXT;
    }

    /**
     * Encodes rendered turns into {@code input_ids} and {@code labels} of equal length; labels are
     * -100 except on trained turns after their {@link QwenChatTemplate#ASSISTANT_HEADER_TOKENS}
     * header tokens. Special segments and image and video blocks become their ids (a video's
     * timestamps {@link #encodeText}), text segments {@link #encodeText}.
     */
    public Encoded encode(List<TemplateTurn> turns) {
        LongSequence ids = new LongSequence();
        LongSequence labels = new LongSequence();
        List<Block> blocks = new ArrayList<>();
        for (TemplateTurn turn : turns) {
            int start = ids.size();
            for (TemplateTurn.Segment segment : turn.segments()) {
                if (segment instanceof TemplateTurn.Special special) {
                    ids.add(special.id());
                } else if (segment instanceof TemplateTurn.Text text) {
                    ids.addAll(encodeText(text.text()));
                } else if (segment instanceof TemplateTurn.Image image) {
                    int blockStart = ids.size();
                    ids.add(VISION_START);
                    ids.addRepeated(IMAGE_PAD, image.pads());
                    ids.add(VISION_END);
                    blocks.add(new Block(false, image.imageIndex(), blockStart, ids.size()));
                } else if (segment instanceof TemplateTurn.Video video) {
                    int blockStart = ids.size();
                    ids.add(VISION_START);
                    if (video.timestamps().isEmpty()) {
                        ids.addRepeated(
                                VIDEO_PAD,
                                Math.multiplyExact(video.gridT(), video.padsPerTemporalPatch()));
                    } else {
                        for (String timestamp : video.timestamps()) {
                            ids.addAll(encodeText(timestamp));
                            ids.add(VISION_START);
                            ids.addRepeated(VIDEO_PAD, video.padsPerTemporalPatch());
                            ids.add(VISION_END);
                        }
                    }
                    ids.add(VISION_END);
                    blocks.add(new Block(true, video.videoIndex(), blockStart, ids.size()));
                }
            }
            int end = ids.size();
            if (turn.trained()) {
                int header = Math.min(start + QwenChatTemplate.ASSISTANT_HEADER_TOKENS, end);
                labels.addRepeated(IGNORE_INDEX, header - start);
                labels.addRange(ids, header, end);
            } else {
                labels.addRepeated(IGNORE_INDEX, end - start);
            }
        }
        return new Encoded(ids.toArray(), labels.toArray(), List.copyOf(blocks));
    }

    /**
     * Closes the tokenizer of {@link #open}, or releases this handle on a shared one (see {@link
     * #loadShared}); a second call does nothing.
     */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        if (shared == null) {
            tokenizer.close();
        } else {
            release(shared);
        }
    }

    /**
     * {@code input_ids} and {@code labels} (int64, same length) of one conversation, and where its
     * image and video blocks are.
     *
     * @param inputIds token ids
     * @param labels labels, -100 where not trained
     * @param blocks the image and video blocks in sequence order
     */
    public record Encoded(long[] inputIds, long[] labels, List<Block> blocks) {}

    /**
     * One image or video block of an encoded conversation: the tokens {@code [start, end)} of
     * {@code input_ids}, from its first {@code <|vision_start|>} to its last {@code <|vision_end|>}
     * (a Qwen3-VL video's timestamps included).
     *
     * @param video whether it is a video block (else an image block)
     * @param index the index of its image in {@code SftRecord#images}, or of its video in {@code
     *     SftRecord#videos}
     * @param start position of its first token
     * @param end position after its last token
     */
    public record Block(boolean video, int index, int start, int end) {}
}

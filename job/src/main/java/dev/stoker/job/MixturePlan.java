package dev.stoker.job;

import dev.stoker.connectors.fetch.ImageStore;
import dev.stoker.connectors.fetch.S3ImageStore;
import dev.stoker.connectors.source.DatasetListing;
import dev.stoker.connectors.source.RecordIndexCache;
import dev.stoker.operators.batch.MixtureOrder;
import dev.stoker.operators.image.QwenVisionConfig;
import dev.stoker.operators.model.PerSource;
import dev.stoker.operators.parse.RecordFormat;
import dev.stoker.operators.tokenize.QwenChatTemplate;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.core.fs.Path;

/**
 * The run's sources, planned once at submission: each source's listing, the {@link MixtureOrder}
 * over them, and each source's settings (record format, image root, vision config, chat template,
 * maximum sequence length) resolved from the {@link MixtureSpec} and the job's options.
 */
final class MixturePlan {
    final MixtureSpec spec;
    final List<DatasetListing> listings;
    final MixtureOrder order;
    final PerSource<RecordFormat> formats;
    final PerSource<String> imageRoots;
    final PerSource<QwenVisionConfig> visionConfigs;
    final PerSource<QwenChatTemplate> chatTemplates;
    final PerSource<Integer> maxSeqLens;

    /**
     * {@code "sha256:<hex>"} of the mixture: the spec (canonical, paths resolved), then each
     * source's listing fingerprint ({@link DatasetListing#fingerprint}) and per-epoch count.
     * Another value when a source, its data, its share or its settings change.
     */
    final String fingerprint;

    private MixturePlan(
            MixtureSpec spec,
            List<DatasetListing> listings,
            MixtureOrder order,
            PerSource<RecordFormat> formats,
            PerSource<String> imageRoots,
            PerSource<QwenVisionConfig> visionConfigs,
            PerSource<QwenChatTemplate> chatTemplates,
            PerSource<Integer> maxSeqLens) {
        this.spec = spec;
        this.listings = List.copyOf(listings);
        this.order = order;
        this.formats = formats;
        this.imageRoots = imageRoots;
        this.visionConfigs = visionConfigs;
        this.chatTemplates = chatTemplates;
        this.maxSeqLens = maxSeqLens;
        this.fingerprint = fingerprint(spec, listings, order);
    }

    /**
     * Lists every source and resolves its settings.
     *
     * @throws IllegalConfigurationException naming the spec and source: a source that cannot be
     *     listed or has no record, an image root or pixel budget that is not valid, image roots of
     *     which some are S3 and some not
     */
    static MixturePlan of(Configuration conf, MixtureSpec spec) {
        RecordIndexCache indexes =
                new RecordIndexCache(
                        conf.get(StokerOptions.INDEX_CACHE),
                        (int) conf.get(StokerOptions.MAX_LINE_LENGTH).getBytes());
        int threads = conf.get(StokerOptions.LISTING_THREADS);
        List<DatasetListing> listings = new ArrayList<>();
        List<String> names = new ArrayList<>();
        Map<String, RecordFormat> formats = new LinkedHashMap<>();
        Map<String, String> roots = new LinkedHashMap<>();
        Map<String, QwenVisionConfig> visions = new LinkedHashMap<>();
        Map<String, QwenChatTemplate> templates = new LinkedHashMap<>();
        Map<String, Integer> seqLens = new LinkedHashMap<>();
        QwenVisionConfig vision = ModelOptions.visionConfig(conf);
        QwenChatTemplate template = ModelOptions.chatTemplate(conf);
        int maxSeqLen = ModelOptions.maxSeqLen(conf);
        for (MixtureSpec.Source source : spec.sources) {
            DatasetListing listing;
            try {
                listing = DatasetListing.scan(new Path(source.path), source.glob, indexes, threads);
            } catch (IOException | RuntimeException e) {
                throw bad(spec, source, "path", source.path, "cannot be listed: " + e);
            }
            if (listing.numRecords() == 0) {
                throw bad(
                        spec,
                        source,
                        "path",
                        source.path,
                        "has no record: "
                                + listing.files().size()
                                + " file(s) matching '"
                                + source.glob
                                + "' under "
                                + source.path
                                + ", all empty");
            }
            listings.add(listing);
            names.add(source.name);
            formats.put(source.name, source.format);
            roots.put(source.name, imageRoot(conf, spec, source, listing));
            visions.put(source.name, vision(vision, spec, source));
            templates.put(
                    source.name,
                    source.systemPrompt == null
                            ? template
                            : template.withDefaultSystemPrompt(
                                    source.systemPrompt.isEmpty() ? null : source.systemPrompt));
            seqLens.put(source.name, source.maxSeqLen == null ? maxSeqLen : source.maxSeqLen);
        }
        long s3 = roots.values().stream().filter(S3ImageStore::isS3).count();
        if (s3 != 0 && s3 != roots.size()) {
            throw new IllegalConfigurationException(
                    "--"
                            + StokerOptions.MIXTURE_PATH.key()
                            + " '"
                            + spec.location
                            + "': the image roots of a mixture are all s3:// or all not (one S3"
                            + " client fetches for every source): "
                            + roots);
        }
        long[] records = listings.stream().mapToLong(DatasetListing::numRecords).toArray();
        MixtureOrder order =
                new MixtureOrder(
                        names,
                        records,
                        spec.countsPerEpoch(records),
                        conf.get(StokerOptions.SHUFFLE),
                        conf.get(StokerOptions.SHUFFLE_SEED));
        return new MixturePlan(
                spec,
                listings,
                order,
                PerSource.of(formats),
                PerSource.of(roots),
                PerSource.of(visions),
                PerSource.of(templates),
                PerSource.of(seqLens));
    }

    /** Whether images are fetched from S3 (then every source's image root is). */
    boolean imagesOnS3() {
        return S3ImageStore.isS3(imageRoots.first());
    }

    /** Each source's image store, for images and videos outside S3. */
    PerSource<ImageStore> imageStores(long maxObjectBytes, long maxVideoBytes) {
        Map<String, ImageStore> stores = new LinkedHashMap<>();
        for (int s = 0; s < order.numSources(); s++) {
            String name = order.name(s);
            stores.put(name, new ImageStore(rootOf(s), maxObjectBytes, maxVideoBytes));
        }
        return PerSource.of(stores);
    }

    /** The image root of source {@code s}. */
    String rootOf(int s) {
        return imageRoots.get(order.name(s));
    }

    /** The largest maximum sequence length of any source. */
    int longestMaxSeqLen() {
        int longest = 0;
        for (int s = 0; s < order.numSources(); s++) {
            longest = Math.max(longest, maxSeqLens.get(order.name(s)));
        }
        return longest;
    }

    private static String imageRoot(
            Configuration conf,
            MixtureSpec spec,
            MixtureSpec.Source source,
            DatasetListing listing) {
        if (source.imageRoot == null) {
            return StokerConfig.imageRoot(conf, listing.root());
        }
        try {
            String root = StokerConfig.imageRootUri(source.imageRoot);
            StokerConfig.checkImageRootDirectory(root, source.imageRoot);
            return root;
        } catch (IllegalConfigurationException e) {
            throw bad(spec, source, "image_root", source.imageRoot, e.getMessage());
        }
    }

    private static QwenVisionConfig vision(
            QwenVisionConfig base, MixtureSpec spec, MixtureSpec.Source source) {
        if (source.minPixels == null && source.maxPixels == null) {
            return base;
        }
        QwenVisionConfig v = base.copy();
        v.minPixels = source.minPixels == null ? v.minPixels : source.minPixels;
        v.maxPixels = source.maxPixels == null ? v.maxPixels : source.maxPixels;
        if (v.minPixels > v.maxPixels) {
            throw bad(
                    spec,
                    source,
                    "min_pixels",
                    v.minPixels,
                    "is above max_pixels "
                            + v.maxPixels
                            + " (the job's value where the source gives none)");
        }
        return v;
    }

    private static IllegalConfigurationException bad(
            MixtureSpec spec, MixtureSpec.Source source, String field, Object value, String why) {
        return new IllegalConfigurationException(spec.where(source, field, value) + " " + why);
    }

    private static String fingerprint(
            MixtureSpec spec, List<DatasetListing> listings, MixtureOrder order) {
        MessageDigest sha;
        try {
            sha = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java platform has SHA-256", e);
        }
        sha.update(spec.canonicalJson().getBytes(StandardCharsets.UTF_8));
        for (int s = 0; s < listings.size(); s++) {
            sha.update((byte) 0);
            sha.update(listings.get(s).fingerprint().getBytes(StandardCharsets.UTF_8));
            sha.update((";" + order.countPerEpoch(s)).getBytes(StandardCharsets.UTF_8));
        }
        return "sha256:" + HexFormat.of().formatHex(sha.digest());
    }
}

package dev.stoker.operators.image;

import dev.stoker.operators.metrics.MetricNames;
import dev.stoker.operators.model.PreprocessedImage;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.MetricGroup;

/**
 * Cost of the image stage per unit of work, for tuning (web UI: operator {@code
 * preprocess-images}):
 *
 * <ul>
 *   <li>{@code imageMegapixels} (counter): megapixels of model input produced, i.e. resized pixels
 *       ({@code patches x patch_size^2}), summed over images;
 *   <li>{@code preprocessMsPerMegapixel} (gauge): milliseconds of decode + resize per megapixel of
 *       model input since the subtask started (-1 before the first image). Divide an image budget
 *       by it to size preprocessing parallelism.
 *   <li>{@code jpegDecoderNative} (gauge): 1 when JPEGs are decoded with libjpeg-turbo, 0 when it
 *       is not installed and they go through the slower ImageIO decoder.
 *   <li>{@code webpDecoderNative} (gauge): 1 when WebP is decoded with libwebp (Pillow's decoder),
 *       0 when its native library did not load and WebP goes through TwelveMonkeys' reader, which
 *       decodes some lossy files to wrong colours (docs/parity.md).
 * </ul>
 */
public final class PreprocessMetrics {
    private final int pixelsPerPatch;
    private final Counter megapixels;
    private long nanos;
    private long pixels;

    /**
     * @param group the operator's metric group
     * @param patchSize the model's spatial patch size (a patch covers {@code patchSize^2} pixels)
     * @param nativeJpeg whether JPEGs are decoded with libjpeg-turbo
     * @param nativeWebp whether WebP is decoded with libwebp
     */
    public PreprocessMetrics(
            MetricGroup group, int patchSize, boolean nativeJpeg, boolean nativeWebp) {
        this.pixelsPerPatch = patchSize * patchSize;
        this.megapixels = group.counter(MetricNames.Preprocess.IMAGE_MEGAPIXELS);
        group.gauge(
                MetricNames.Preprocess.PREPROCESS_MS_PER_MEGAPIXEL,
                (Gauge<Double>) this::msPerMegapixel);
        int jpegNative = nativeJpeg ? 1 : 0;
        group.gauge(MetricNames.Preprocess.JPEG_DECODER_NATIVE, (Gauge<Integer>) () -> jpegNative);
        int webpNative = nativeWebp ? 1 : 0;
        group.gauge(MetricNames.Preprocess.WEBP_DECODER_NATIVE, (Gauge<Integer>) () -> webpNative);
    }

    /** Records one preprocessed image and the wall time it took. */
    public synchronized void imageDone(long elapsedNanos, PreprocessedImage image) {
        long px = (long) image.numPatches() * pixelsPerPatch;
        long mpBefore = pixels / 1_000_000;
        nanos += elapsedNanos;
        pixels += px;
        megapixels.inc(pixels / 1_000_000 - mpBefore);
    }

    synchronized double msPerMegapixel() {
        return pixels == 0 ? -1 : (nanos / 1e6) / (pixels / 1e6);
    }
}

package dev.stoker.connectors.protocol;

/**
 * Element type of the {@code pixel_values} column in batch files (schema metadata {@code
 * stoker.pixel_dtype}). For {@link #FLOAT32} and {@link #BFLOAT16} the sink computes the normalised
 * float32 values ({@code Patchifier}) and converts them as it writes; {@link #UINT8} leaves the
 * arithmetic to the trainer.
 */
public enum PixelDtype {
    /** IEEE 754 float32: {@code list<fixed_size_list<float32>[D]>}, 4 bytes per value. */
    FLOAT32("float32", Float.BYTES),
    /**
     * bfloat16, 2 bytes per value, stored as its raw bits in {@code
     * list<fixed_size_list<uint16>[D]>} (Arrow has no bfloat16 type): each float32 rounded to
     * nearest, ties to even, as PyTorch's {@code tensor.to(torch.bfloat16)} rounds; infinities stay
     * infinite, values beyond the bfloat16 range become infinite, NaN becomes {@code 0x7FC0}.
     */
    BFLOAT16("bfloat16", Short.BYTES),
    /**
     * The resized uint8 RGB samples, not normalised, 1 byte per value: {@code
     * list<fixed_size_list<uint8>[D]>} in the rows, order and layout of the other element types
     * ({@code Patchifier#patchifyBytes}), so value {@code j} of a row belongs to channel {@code j /
     * (D / 3)}. The reader computes the float32 values on the trainer's device in the sink's order
     * of operations: {@code ((float) (u * rescale_factor) - (float) mean[c]) / (float) std[c]},
     * with the manifest's {@code rescale_factor}, {@code image_mean} and {@code image_std}.
     */
    UINT8("uint8", Byte.BYTES);

    /** The value of the {@code stoker.pixel_dtype} metadata. */
    public final String metadataName;

    /** Bytes per value. */
    public final int bytes;

    PixelDtype(String metadataName, int bytes) {
        this.metadataName = metadataName;
        this.bytes = bytes;
    }

    /**
     * The bfloat16 bits of {@code value}, rounded to nearest even.
     *
     * @return the 16 bits: sign, 8 exponent bits, 7 mantissa bits
     */
    public static short toBfloat16(float value) {
        int bits = Float.floatToRawIntBits(value);
        if ((bits & 0x7FFF_FFFF) > 0x7F80_0000) {
            return (short) 0x7FC0;
        }
        return (short) ((bits + 0x7FFF + ((bits >>> 16) & 1)) >>> 16);
    }
}

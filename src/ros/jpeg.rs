//! `encode: {"<field>": "jpeg"}`: a `sensor_msgs/msg/Image` in `rgb8`, `bgr8` or `mono8`
//! written as a base64 JPEG instead of its raw pixels, with the `jpeg-encoder` crate.

/// JPEG quality of the encoded images (1–100).
const QUALITY: u8 = 90;

/// What a JPEG encoding needs of the image message around the pixel field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageShape {
    /// Pixels per row.
    pub width: u64,
    /// Rows.
    pub height: u64,
    /// Bytes per row, padding included.
    pub step: u64,
    /// The pixel encoding (`rgb8`, `bgr8`, `mono8`).
    pub encoding: String,
}

/// The JPEG of the image `pixels` of `shape`; the error says what the image lacks.
pub fn encode(pixels: &[u8], shape: &ImageShape) -> Result<Vec<u8>, String> {
    let (color, channels) = match shape.encoding.as_str() {
        "rgb8" => (jpeg_encoder::ColorType::Rgb, 3),
        "bgr8" => (jpeg_encoder::ColorType::Bgr, 3),
        "mono8" => (jpeg_encoder::ColorType::Luma, 1),
        other => {
            return Err(format!(
                "JPEG encoding needs an image in rgb8, bgr8 or mono8, not '{other}'"
            ));
        }
    };
    let (width, height) = match (u16::try_from(shape.width), u16::try_from(shape.height)) {
        (Ok(w), Ok(h)) if w > 0 && h > 0 => (w, h),
        _ => {
            return Err(format!(
                "a {}x{} image cannot be a JPEG (1 to 65535 pixels each way)",
                shape.width, shape.height
            ));
        }
    };
    let row = usize::from(width) * channels;
    let step = usize::try_from(shape.step).unwrap_or(usize::MAX);
    if step < row || pixels.len() / step.max(1) < usize::from(height) {
        return Err(format!(
            "the image's {} bytes do not hold {height} rows of {row} bytes every {step}",
            pixels.len()
        ));
    }
    let packed: Vec<u8>;
    let data = match step == row {
        true => &pixels[..row * usize::from(height)],
        false => {
            // Rows padded to `step`: the encoder takes them packed.
            packed = pixels
                .chunks(step)
                .take(usize::from(height))
                .flat_map(|r| &r[..row])
                .copied()
                .collect();
            &packed
        }
    };
    let mut out = Vec::new();
    jpeg_encoder::Encoder::new(&mut out, QUALITY)
        .encode(data, width, height, color)
        .map_err(|e| format!("the JPEG encoder failed: {e}"))?;
    Ok(out)
}

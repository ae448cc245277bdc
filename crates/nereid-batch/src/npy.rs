//! NumPy's `.npy` format, version 1.0 to 3.0: a magic string, a header
//! (a Python dict literal with `descr`, `fortran_order` and `shape`) padded
//! to 64 bytes, then the array's bytes in C order. Only what a batch job
//! reads and writes: little-endian numbers, booleans, and fixed-width
//! bytes (`S`) and text (`U`) for BYTES inputs.

use nereid_core::DataType;

const MAGIC: &[u8] = b"\x93NUMPY";
/// Headers are padded so that the data starts at a multiple of this.
const ALIGN: usize = 64;

/// An element type an `.npy` file may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element {
    /// A number or boolean, as KServe's raw bytes hold it.
    Fixed(DataType),
    /// `S<n>`: n bytes, trailing NULs dropped (numpy's own convention).
    Bytes(usize),
    /// `U<n>`: n UTF-32 code points, trailing NULs dropped.
    Text(usize),
}

impl Element {
    pub fn size(self) -> usize {
        match self {
            Element::Fixed(dt) => dt.element_size().unwrap_or(0),
            Element::Bytes(n) => n,
            Element::Text(n) => 4 * n,
        }
    }

    /// The `descr` string numpy writes for it.
    pub fn descr(self) -> Result<String, String> {
        let code = match self {
            Element::Bytes(n) => return Ok(format!("|S{n}")),
            Element::Text(n) => return Ok(format!("<U{n}")),
            Element::Fixed(dt) => match dt {
                DataType::Bool => "|b1",
                DataType::Uint8 => "|u1",
                DataType::Int8 => "|i1",
                DataType::Uint16 => "<u2",
                DataType::Uint32 => "<u4",
                DataType::Uint64 => "<u8",
                DataType::Int16 => "<i2",
                DataType::Int32 => "<i4",
                DataType::Int64 => "<i8",
                DataType::Fp16 => "<f2",
                DataType::Fp32 => "<f4",
                DataType::Fp64 => "<f8",
                DataType::Bf16 | DataType::Bytes => {
                    return Err(format!("numpy has no dtype for {dt} elements"));
                }
            },
        };
        Ok(code.to_string())
    }

    fn parse(descr: &str) -> Result<Element, String> {
        let unsupported = || format!("dtype '{descr}' is not one nereid batch reads");
        let (order, code) = descr.split_at_checked(1).ok_or_else(unsupported)?;
        if order == ">" {
            return Err(format!(
                "dtype '{descr}' is big-endian; save the array little-endian (arr.astype(arr.dtype.newbyteorder('<')))"
            ));
        }
        if !matches!(order, "<" | "|" | "=") {
            return Err(unsupported());
        }
        let (kind, size) = code.split_at_checked(1).ok_or_else(unsupported)?;
        let size: usize = size.parse().map_err(|_| unsupported())?;
        let dt = match (kind, size) {
            ("b", 1) => DataType::Bool,
            ("u", 1) => DataType::Uint8,
            ("u", 2) => DataType::Uint16,
            ("u", 4) => DataType::Uint32,
            ("u", 8) => DataType::Uint64,
            ("i", 1) => DataType::Int8,
            ("i", 2) => DataType::Int16,
            ("i", 4) => DataType::Int32,
            ("i", 8) => DataType::Int64,
            ("f", 2) => DataType::Fp16,
            ("f", 4) => DataType::Fp32,
            ("f", 8) => DataType::Fp64,
            ("S", n) => return Ok(Element::Bytes(n)),
            ("U", n) => return Ok(Element::Text(n)),
            _ => return Err(unsupported()),
        };
        Ok(Element::Fixed(dt))
    }
}

/// What an `.npy` header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub element: Element,
    pub shape: Vec<usize>,
    /// Where the array's bytes start.
    pub data_offset: usize,
}

impl Header {
    /// Bytes of one row (everything after the first axis).
    pub fn row_bytes(&self) -> usize {
        self.shape.iter().skip(1).product::<usize>() * self.element.size()
    }

    pub fn rows(&self) -> usize {
        self.shape.first().copied().unwrap_or(1)
    }
}

/// Reads the header at the start of `file`.
pub fn parse_header(file: &[u8]) -> Result<Header, String> {
    if !file.starts_with(MAGIC) || file.len() < 10 {
        return Err("not an .npy file (no \\x93NUMPY magic)".into());
    }
    let (len, start) = match file[6] {
        1 => (usize::from(u16::from_le_bytes([file[8], file[9]])), 10),
        2 | 3 if file.len() >= 12 => (
            u32::from_le_bytes([file[8], file[9], file[10], file[11]]) as usize,
            12,
        ),
        major => return Err(format!(".npy format version {major} is not supported")),
    };
    let text = file
        .get(start..start + len)
        .ok_or("the .npy header is cut short")?;
    let text = std::str::from_utf8(text).map_err(|_| "the .npy header is not text")?;
    let descr = dict_value(text, "descr")?;
    let descr = descr
        .trim()
        .strip_prefix('\'')
        .and_then(|d| d.strip_suffix('\''))
        .ok_or_else(|| format!("the .npy dtype {descr} is not one nereid batch reads"))?;
    if dict_value(text, "fortran_order")?.trim() != "False" {
        return Err(
            "the array is in Fortran order; save it in C order (np.ascontiguousarray)".into(),
        );
    }
    let shape = dict_value(text, "shape")?;
    let shape = shape
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("the .npy shape {shape} is not a tuple"))?;
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| {
            d.parse::<usize>()
                .map_err(|_| format!("bad .npy dimension '{d}'"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Header {
        element: Element::parse(descr)?,
        shape,
        data_offset: start + len,
    })
}

/// The text after `'key':` up to the next top-level comma.
fn dict_value<'a>(text: &'a str, key: &str) -> Result<&'a str, String> {
    let quoted = format!("'{key}':");
    let at = text
        .find(&quoted)
        .ok_or_else(|| format!("the .npy header has no '{key}'"))?;
    let rest = &text[at + quoted.len()..];
    let mut depth = 0;
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' | '}' if depth == 0 => return Ok(&rest[..i]),
            _ => {}
        }
    }
    Err(format!("the .npy header's '{key}' does not end"))
}

/// A version 1.0 header for an array of `shape` (version 2.0 when the
/// header would not fit in 64 KiB).
pub fn header(element: Element, shape: &[usize]) -> Result<Vec<u8>, String> {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let tuple = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {tuple}, }}",
        element.descr()?
    );
    let prefix = if dict.len() + 11 < usize::from(u16::MAX) {
        10
    } else {
        12
    };
    let padded = (prefix + dict.len() + 1).div_ceil(ALIGN) * ALIGN - prefix;
    let mut out = Vec::with_capacity(prefix + padded);
    out.extend_from_slice(MAGIC);
    if prefix == 10 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(padded as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(padded as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(prefix + padded - 1, b' ');
    out.push(b'\n');
    Ok(out)
}

/// The elements of one `S` or `U` row, each without its trailing NULs.
pub fn strings(element: Element, row: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    match element {
        Element::Bytes(n) if n > 0 => Ok(row
            .chunks(n)
            .map(|s| {
                let end = s.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
                s[..end].to_vec()
            })
            .collect()),
        Element::Text(n) if n > 0 => row
            .chunks(4 * n)
            .map(|s| {
                let text: String = s
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .take_while(|&c| c != 0)
                    .map(|c| char::from_u32(c).ok_or("a U element holds an invalid code point"))
                    .collect::<Result<_, _>>()?;
                Ok(text.into_bytes())
            })
            .collect(),
        _ => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_header_reads_back_aligned() {
        for shape in [vec![3usize, 256], vec![7], vec![2, 3, 4], vec![]] {
            let bytes = header(Element::Fixed(DataType::Fp32), &shape).unwrap();
            assert_eq!(bytes.len() % 64, 0);
            let parsed = parse_header(&bytes).unwrap();
            assert_eq!(parsed.shape, shape);
            assert_eq!(parsed.element, Element::Fixed(DataType::Fp32));
            assert_eq!(parsed.data_offset, bytes.len());
        }
    }

    /// A version 1.0 file's header as numpy pads it.
    fn raw(dict: &str) -> Vec<u8> {
        let mut file = b"\x93NUMPY\x01\x00\x76\x00".to_vec();
        file.extend_from_slice(dict.as_bytes());
        file.resize(127, b' ');
        file.push(b'\n');
        file
    }

    #[test]
    fn numpy_headers_parse() {
        // As numpy 2 writes np.zeros((2, 3), dtype='<i8') and a 1-D bool array.
        let file = raw("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }");
        let h = parse_header(&file).unwrap();
        assert_eq!(h.element, Element::Fixed(DataType::Int64));
        assert_eq!((h.rows(), h.row_bytes(), h.data_offset), (2, 24, 128));
        let file = raw("{'descr': '|b1', 'fortran_order': False, 'shape': (5,), }");
        let h = parse_header(&file).unwrap();
        assert_eq!(
            (h.element, h.shape.clone()),
            (Element::Fixed(DataType::Bool), vec![5])
        );
    }

    #[test]
    fn unsupported_arrays_are_refused_with_the_reason() {
        let file = |descr: &str, fortran: &str| {
            raw(&format!(
                "{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': (1,), }}"
            ))
        };
        assert!(
            parse_header(&file(">f4", "False"))
                .unwrap_err()
                .contains("big-endian")
        );
        assert!(
            parse_header(&file("<f4", "True"))
                .unwrap_err()
                .contains("Fortran")
        );
        assert!(
            parse_header(&file("<c8", "False"))
                .unwrap_err()
                .contains("'<c8'")
        );
        assert!(parse_header(b"PK\x03\x04").unwrap_err().contains("magic"));
    }

    #[test]
    fn fixed_width_strings_lose_their_padding() {
        assert_eq!(
            strings(Element::Bytes(3), b"ab\0xyz").unwrap(),
            [b"ab".to_vec(), b"xyz".to_vec()]
        );
        let mut row = Vec::new();
        for c in ['h', 'é', '\0'] {
            row.extend_from_slice(&(c as u32).to_le_bytes());
        }
        assert_eq!(
            strings(Element::Text(3), &row).unwrap(),
            ["hé".as_bytes().to_vec()]
        );
    }
}

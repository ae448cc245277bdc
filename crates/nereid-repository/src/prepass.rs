//! Triton's `config.pbtxt` files write a repeated message field as
//! `input [ { ... } ]`, without the `:` that the protobuf text format
//! grammar of prost-reflect requires before a list. This pre-pass inserts
//! that colon and changes nothing else, so line numbers stay the same.

/// Where the pre-pass inserted colons (byte offsets into its input), so a
/// parser position in the output can be mapped back to the original text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Insertions(Vec<usize>);

impl Insertions {
    /// Maps a byte offset in the rewritten text back to the original text.
    pub(crate) fn original_offset(&self, rewritten: usize) -> usize {
        let mut shift = 0;
        for &at in &self.0 {
            // The colon inserted at original offset `at` sits at `at + shift`.
            if at + shift >= rewritten {
                break;
            }
            shift += 1;
        }
        rewritten - shift
    }
}

/// The previous significant token, which tells a field name (insert a colon
/// before a following `[`) from a value (`kind: KIND_GPU`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prev {
    Colon,
    Other,
}

/// Inserts `:` between a field name and a following `[` (outside strings
/// and `#` comments). Text that already has the colon is left unchanged, so
/// the pass is idempotent.
pub fn insert_list_colons(text: &str) -> String {
    rewrite(text).0
}

pub(crate) fn rewrite(text: &str) -> (String, Insertions) {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let mut inserted = Vec::new();
    let mut prev = Prev::Other;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let end = match b {
            b'"' | b'\'' => string_end(bytes, i),
            b'#' => comment_end(bytes, i),
            b if b.is_ascii_whitespace() => i + 1,
            b if is_word_start(b) => {
                let end = word_end(bytes, i);
                let is_field_name = b.is_ascii_alphabetic() || b == b'_';
                if is_field_name
                    && prev != Prev::Colon
                    && next_significant(bytes, end) == Some(b'[')
                {
                    out.push_str(&text[i..end]);
                    out.push(':');
                    inserted.push(end);
                    prev = Prev::Colon;
                    i = end;
                    continue;
                }
                end
            }
            _ => i + text[i..].chars().next().map_or(1, char::len_utf8),
        };
        if !b.is_ascii_whitespace() && b != b'#' {
            prev = if b == b':' { Prev::Colon } else { Prev::Other };
        }
        // Every boundary above is an ASCII byte or a char's end.
        out.push_str(&text[i..end]);
        i = end;
    }
    (out, Insertions(inserted))
}

fn is_word_start(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn word_end(bytes: &[u8], start: usize) -> usize {
    let mut i = start;
    while i < bytes.len() && is_word_start(bytes[i]) {
        i += 1;
    }
    i
}

/// End (exclusive) of the quoted string starting at `start`. A string cannot
/// span lines in the text format, so an unterminated one ends at the newline.
fn string_end(bytes: &[u8], start: usize) -> usize {
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' => return i,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// End (exclusive) of the `#` comment starting at `start`: the newline.
fn comment_end(bytes: &[u8], start: usize) -> usize {
    bytes[start..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(bytes.len(), |n| start + n)
}

/// The next byte that is neither whitespace nor inside a comment.
fn next_significant(bytes: &[u8], mut i: usize) -> Option<u8> {
    while i < bytes.len() {
        match bytes[i] {
            b'#' => i = comment_end(bytes, i),
            b if b.is_ascii_whitespace() => i += 1,
            b => return Some(b),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_colon_before_message_list() {
        assert_eq!(
            insert_list_colons("input [ { name: \"a\" } ]"),
            "input: [ { name: \"a\" } ]"
        );
        assert_eq!(insert_list_colons("input[{}]"), "input:[{}]");
    }

    #[test]
    fn keeps_existing_colons() {
        let text = "dims: [ 16 ]\ninput: [ { dims: [ -1 ] } ]";
        assert_eq!(insert_list_colons(text), text);
    }

    #[test]
    fn nested_lists() {
        let text = "input [ { name: \"x\" reshape { shape [ 1, 2 ] } } ]\noutput [ ]";
        assert_eq!(
            insert_list_colons(text),
            "input: [ { name: \"x\" reshape { shape: [ 1, 2 ] } } ]\noutput: [ ]"
        );
    }

    #[test]
    fn ignores_strings() {
        let text = "name: \"input [ x\" label: 'a [ b' s: \"esc \\\" input [\"";
        assert_eq!(insert_list_colons(text), text);
    }

    #[test]
    fn ignores_comments_and_looks_through_them() {
        assert_eq!(
            insert_list_colons("# input [ x\nname: \"a\""),
            "# input [ x\nname: \"a\""
        );
        assert_eq!(
            insert_list_colons("input # the inputs [\n[ { } ]"),
            "input: # the inputs [\n[ { } ]"
        );
    }

    #[test]
    fn map_entries() {
        let text = "parameters [ { key: \"x\" value: { string_value: \"[y]\" } } ]";
        assert_eq!(
            insert_list_colons(text),
            "parameters: [ { key: \"x\" value: { string_value: \"[y]\" } } ]"
        );
        let text = "parameters { key: \"x\" value { string_value: \"y\" } }";
        assert_eq!(insert_list_colons(text), text);
    }

    #[test]
    fn values_are_not_field_names() {
        // An enum value or number followed by `[` (an extension name) is left alone.
        assert_eq!(
            insert_list_colons("kind: KIND_GPU [a.b]: 1"),
            "kind: KIND_GPU [a.b]: 1"
        );
        assert_eq!(insert_list_colons("x: 1e5 [a]"), "x: 1e5 [a]");
    }

    #[test]
    fn field_after_value_gets_colon() {
        assert_eq!(
            insert_list_colons("kind: KIND_GPU gpus [ 0 ]"),
            "kind: KIND_GPU gpus: [ 0 ]"
        );
    }

    #[test]
    fn maps_offsets_back() {
        let (out, ins) = rewrite("a [ ] b [ ]");
        assert_eq!(out, "a: [ ] b: [ ]");
        // "b" is at 7 in the output and 6 in the input.
        assert_eq!(ins.original_offset(7), 6);
        assert_eq!(ins.original_offset(1), 1);
        assert_eq!(ins.original_offset(0), 0);
        assert_eq!(ins.original_offset(3), 2);
    }
}

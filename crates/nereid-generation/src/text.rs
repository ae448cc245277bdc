//! The text a sequence streams: token pieces are bytes that may end inside
//! a UTF-8 character, and a stop string may arrive split across tokens.
//! [`TextStream`] hands out only whole characters and holds back any tail
//! that could still become a stop string; on a stop it gives the text
//! before it (with it, when asked) and says so.

/// What one piece added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    /// Text that may be sent now.
    pub text: String,
    /// A stop string was reached; nothing more is to be sent.
    pub stopped: bool,
}

/// The text of one sequence, as it is generated.
#[derive(Debug, Clone, Default)]
pub struct TextStream {
    bytes: Vec<u8>,
    held: String,
    stops: Vec<String>,
    include_stop: bool,
    stopped: bool,
}

impl TextStream {
    pub fn new(stops: Vec<String>, include_stop: bool) -> TextStream {
        TextStream {
            stops,
            include_stop,
            ..TextStream::default()
        }
    }

    /// Adds the bytes of one token.
    pub fn push(&mut self, piece: &[u8]) -> Delta {
        if self.stopped {
            return Delta {
                text: String::new(),
                stopped: true,
            };
        }
        self.bytes.extend_from_slice(piece);
        self.decode_whole_characters();
        if let Some((at, len)) = self.first_stop() {
            let end = if self.include_stop { at + len } else { at };
            let text = self.held[..end].to_owned();
            self.held.clear();
            self.stopped = true;
            return Delta {
                text,
                stopped: true,
            };
        }
        let keep = self.possible_stop_tail();
        let text = self.held[..self.held.len() - keep].to_owned();
        self.held.drain(..self.held.len() - keep);
        Delta {
            text,
            stopped: false,
        }
    }

    /// Everything still held, once generation ended without a stop (a cut
    /// character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        let mut text = std::mem::take(&mut self.held);
        text.push_str(&String::from_utf8_lossy(&self.bytes));
        self.bytes.clear();
        text
    }

    fn decode_whole_characters(&mut self) {
        loop {
            match std::str::from_utf8(&self.bytes) {
                Ok(text) => {
                    self.held.push_str(text);
                    self.bytes.clear();
                    return;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    let text = String::from_utf8_lossy(&self.bytes[..valid]).into_owned();
                    self.held.push_str(&text);
                    match e.error_len() {
                        // Not a character, and never will be.
                        Some(bad) => {
                            self.held.push(char::REPLACEMENT_CHARACTER);
                            self.bytes.drain(..valid + bad);
                        }
                        // A character still being written.
                        None => {
                            self.bytes.drain(..valid);
                            return;
                        }
                    }
                }
            }
        }
    }

    /// The first stop string in the held text: where, and its length.
    fn first_stop(&self) -> Option<(usize, usize)> {
        self.stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s.len())))
            .min()
    }

    /// The length of the longest tail of the held text that begins some
    /// stop string.
    fn possible_stop_tail(&self) -> usize {
        let held = &self.held;
        let mut longest = 0;
        for stop in &self.stops {
            for (i, _) in held.char_indices().rev().take(stop.len()) {
                let tail = &held[i..];
                if tail.len() > longest && tail.len() < stop.len() && stop.starts_with(tail) {
                    longest = tail.len();
                }
            }
        }
        longest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(stream: &mut TextStream, pieces: &[&[u8]]) -> (String, bool) {
        let mut out = String::new();
        for piece in pieces {
            let delta = stream.push(piece);
            out.push_str(&delta.text);
            if delta.stopped {
                return (out, true);
            }
        }
        out.push_str(&stream.finish());
        (out, false)
    }

    #[test]
    fn a_character_split_across_tokens_is_sent_whole() {
        let mut stream = TextStream::default();
        let euro = "€".as_bytes();
        assert_eq!(stream.push(&euro[..2]).text, "");
        assert_eq!(stream.push(&euro[2..]).text, "€");
    }

    #[test]
    fn a_stop_string_split_across_tokens_ends_the_text_before_it() {
        let mut stream = TextStream::new(vec!["END".into()], false);
        let (text, stopped) = feed(&mut stream, &[b"one E", b"N", b"D two"]);
        assert_eq!((text.as_str(), stopped), ("one ", true));
    }

    #[test]
    fn a_held_tail_that_turns_out_not_to_stop_is_sent() {
        let mut stream = TextStream::new(vec!["END".into()], false);
        assert_eq!(stream.push(b"one E").text, "one ");
        assert_eq!(stream.push(b"X").text, "EX");
        assert_eq!(feed(&mut stream, &[b" EN"]), (String::from(" EN"), false));
    }

    #[test]
    fn the_stop_string_is_kept_when_asked() {
        let mut stream = TextStream::new(vec!["\n".into(), "ab".into()], true);
        assert_eq!(
            feed(&mut stream, &[b"xxab\nyy"]),
            (String::from("xxab"), true)
        );
    }

    #[test]
    fn bytes_that_are_no_character_become_replacement_characters() {
        let mut stream = TextStream::default();
        assert_eq!(stream.push(&[b'a', 0xFF, b'b']).text, "a\u{FFFD}b");
        assert_eq!(stream.push(&[0xE2, 0x82]).text, "");
        assert_eq!(stream.finish(), "\u{FFFD}");
    }
}

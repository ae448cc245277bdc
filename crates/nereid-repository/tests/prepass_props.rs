//! Properties of the `input [` -> `input: [` pre-pass on arbitrary text.

use nereid_repository::{insert_list_colons, parse_config_text};
use proptest::prelude::*;

/// Text built from the pieces that matter to the pre-pass, so brackets,
/// quotes, comments and identifiers meet in every order.
fn pbtxt_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("input".to_owned()),
        Just("dims".to_owned()),
        Just("KIND_GPU".to_owned()),
        Just("16".to_owned()),
        Just("-1.5e3".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just(":".to_owned()),
        Just(",".to_owned()),
        Just("\"".to_owned()),
        Just("'".to_owned()),
        Just("\\".to_owned()),
        Just("#".to_owned()),
        Just("\n".to_owned()),
        Just(" ".to_owned()),
        Just("é".to_owned()),
        "[a-z_]{1,6}",
    ];
    prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

proptest! {
    #[test]
    fn never_panics_and_is_idempotent(text in any::<String>()) {
        let once = insert_list_colons(&text);
        prop_assert_eq!(insert_list_colons(&once), once.clone());
        prop_assert_eq!(once.replace(':', ""), text.replace(':', ""));
    }

    #[test]
    fn structured_text_is_idempotent_and_only_gains_colons(text in pbtxt_like()) {
        let once = insert_list_colons(&text);
        prop_assert_eq!(insert_list_colons(&once), once.clone());
        prop_assert_eq!(once.replace(':', ""), text.replace(':', ""));
        prop_assert_eq!(once.lines().count(), text.lines().count());
    }

    #[test]
    fn parser_never_panics(text in pbtxt_like()) {
        let _ = parse_config_text(&text);
    }
}

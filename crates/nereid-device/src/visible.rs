//! `CUDA_VISIBLE_DEVICES` as the CUDA driver reads it. The real driver
//! applies it itself; the fake layer applies it with this, so that tests
//! see the same numbering a user does.

/// The physical devices, in the order they become ids 0, 1, ..., that
/// `value` makes visible among `uuids` (each device's `GPU-...` UUID, by
/// physical index). `None` (the variable unset) shows every device. Each
/// entry is an index or a UUID prefix; the list stops at the first entry
/// that names no device, or one already named, as the driver's does.
pub fn visible_devices(value: Option<&str>, uuids: &[String]) -> Vec<usize> {
    let Some(value) = value else {
        return (0..uuids.len()).collect();
    };
    let mut visible: Vec<usize> = Vec::new();
    for entry in value.split(',').map(str::trim) {
        let Some(index) = resolve(entry, uuids) else {
            break;
        };
        if visible.contains(&index) {
            break;
        }
        visible.push(index);
    }
    visible
}

fn resolve(entry: &str, uuids: &[String]) -> Option<usize> {
    if let Ok(index) = entry.parse::<usize>() {
        return (index < uuids.len()).then_some(index);
    }
    if !entry.starts_with("GPU-") {
        return None;
    }
    let mut matches = uuids
        .iter()
        .enumerate()
        .filter(|(_, uuid)| uuid.starts_with(entry));
    let (index, _) = matches.next()?;
    // A prefix that fits two devices names neither.
    matches.next().is_none().then_some(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuids() -> Vec<String> {
        ["GPU-aa11", "GPU-ab22", "GPU-cc33", "GPU-dd44"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn unset_shows_all() {
        assert_eq!(visible_devices(None, &uuids()), vec![0, 1, 2, 3]);
    }

    #[test]
    fn indices_reorder_and_renumber() {
        assert_eq!(visible_devices(Some("2,0"), &uuids()), vec![2, 0]);
        assert_eq!(visible_devices(Some(" 3 "), &uuids()), vec![3]);
    }

    #[test]
    fn empty_or_invalid_hides_the_rest() {
        assert!(visible_devices(Some(""), &uuids()).is_empty());
        assert!(visible_devices(Some("-1"), &uuids()).is_empty());
        assert_eq!(visible_devices(Some("1,7,2"), &uuids()), vec![1]);
        assert_eq!(visible_devices(Some("1,1,2"), &uuids()), vec![1]);
    }

    #[test]
    fn uuid_prefixes_must_be_unique() {
        assert_eq!(
            visible_devices(Some("GPU-cc,GPU-aa1"), &uuids()),
            vec![2, 0]
        );
        assert!(visible_devices(Some("GPU-a"), &uuids()).is_empty());
    }
}

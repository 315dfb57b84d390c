//! Text made safe as one path component: a run's name as a folder, a sweep's values in a run
//! name, an index entry's file. One rule, each caller choosing what it keeps.

/// `text` with every character other than an ASCII letter, an ASCII digit or one of `keep`
/// replaced by `with`, one for one (so a caller may cut the result by characters). Names made
/// by it are looked up again later (index entries, imported runs): the rule must not change.
pub fn path_component(text: &str, keep: &str, with: char) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || keep.contains(c) {
                c
            } else {
                with
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::path_component;

    #[test]
    fn keeps_letters_digits_and_the_chosen_marks() {
        assert_eq!(path_component("lr=0.1 cos/1", "=._-", '-'), "lr=0.1-cos-1");
        assert_eq!(path_component("lr=0.1 cos/1", "-_.", '_'), "lr_0.1_cos_1");
        // Non-ASCII letters go too, one character each: "é" is one replacement, not two.
        assert_eq!(path_component("café..", "", '_'), "caf___");
        assert_eq!(path_component("", "-", '_'), "");
    }
}

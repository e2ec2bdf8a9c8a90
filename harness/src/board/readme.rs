//! The README's generated regions: everything between `<!-- board:NAME:begin -->` and
//! `<!-- board:NAME:end -->` belongs to the board generator.

use anyhow::{Result, bail};

/// The begin / end markers of board `name`.
pub fn markers(name: &str) -> (String, String) {
    (
        format!("<!-- board:{name}:begin -->"),
        format!("<!-- board:{name}:end -->"),
    )
}

/// Replace the region of board `name` in `text` with `body`; `Ok(None)` when the README
/// has no markers for it.
pub fn replace_region(text: &str, name: &str, body: &str) -> Result<Option<String>> {
    let (b, e) = markers(name);
    let Some(start) = text.find(&b) else {
        return Ok(None);
    };
    let after = start + b.len();
    let Some(end_rel) = text[after..].find(&e) else {
        bail!("README has {b} without {e}");
    };
    if text[after + end_rel + e.len()..].contains(&b) {
        bail!("README has {b} twice");
    }
    let mut out = String::with_capacity(text.len() + body.len());
    out.push_str(&text[..after]);
    out.push('\n');
    out.push_str(body.trim_end_matches('\n'));
    out.push('\n');
    out.push_str(&text[after + end_rel..]);
    Ok(Some(out))
}

/// The names of every board region `text` opens (`<!-- board:NAME:begin -->`), in order.
pub fn region_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("<!-- board:") {
        rest = &rest[i + "<!-- board:".len()..];
        if let Some(j) = rest.find(":begin -->")
            && !rest[..j].contains(['\n', ' '])
        {
            names.push(rest[..j].to_owned());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_names_are_the_begin_markers() {
        let t = "<!-- board:a:begin -->\nx\n<!-- board:a:end -->\n<!-- board:b-2:begin -->\n\
                 <!-- board:b-2:end --> <!-- board:not one -->";
        assert_eq!(region_names(t), vec!["a".to_owned(), "b-2".to_owned()]);
        assert!(region_names("no regions").is_empty());
    }

    #[test]
    fn regions_are_replaced_idempotently() {
        let text = "# T\n<!-- board:x:begin -->\nold\n<!-- board:x:end -->\ntail\n";
        let once = replace_region(text, "x", "new\n").unwrap().unwrap();
        assert_eq!(
            once,
            "# T\n<!-- board:x:begin -->\nnew\n<!-- board:x:end -->\ntail\n"
        );
        assert_eq!(replace_region(&once, "x", "new").unwrap().unwrap(), once);
        assert_eq!(replace_region(text, "y", "z").unwrap(), None);
        assert!(replace_region("<!-- board:x:begin -->", "x", "z").is_err());
    }
}

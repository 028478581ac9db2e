//! The plain-text table a command line prints for a person: columns aligned on the widest cell,
//! two spaces apart.

/// The lines of `rows` (the header first, if any) as aligned columns: each cell padded to its
/// column's widest cell (counted in characters), on the left or, for the columns `right` says, on
/// the right; cells two spaces apart; no line ends in spaces.
pub fn aligned<R: AsRef<[S]>, S: AsRef<str>>(
    rows: &[R],
    right: impl Fn(usize) -> bool,
) -> Vec<String> {
    let mut widths = Vec::new();
    for row in rows {
        for (i, cell) in row.as_ref().iter().enumerate() {
            if widths.len() <= i {
                widths.push(0);
            }
            widths[i] = widths[i].max(cell.as_ref().chars().count());
        }
    }
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row
                .as_ref()
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (cell, w))| {
                    if right(i) {
                        format!("{:>w$}", cell.as_ref())
                    } else {
                        format!("{:<w$}", cell.as_ref())
                    }
                })
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_padded_by_characters_and_lines_not_by_trailing_spaces() {
        let rows = vec![
            vec!["NAME".to_string(), "STATE".into(), "NOTE".into()],
            vec!["größe".into(), "on".into(), String::new()],
            vec!["a".into(), "deallocated".into(), "x".into()],
        ];
        assert_eq!(
            aligned(&rows, |_| false),
            [
                "NAME   STATE        NOTE",
                "größe  on",
                "a      deallocated  x",
            ]
        );
        assert_eq!(
            aligned(&rows, |c| c == 0),
            [
                " NAME  STATE        NOTE",
                "größe  on",
                "    a  deallocated  x",
            ]
        );
        assert!(aligned::<Vec<String>, String>(&[], |_| false).is_empty());
    }
}

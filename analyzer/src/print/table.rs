//! Aligned text tables for terminal output.

/// How a column's cells are aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Text: left-aligned.
    Left,
    /// Numbers: right-aligned.
    Right,
}

/// A table with a header row; columns are as wide as their widest cell.
#[derive(Clone, Debug)]
pub struct Table {
    headers: Vec<String>,
    aligns: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new(columns: &[(&str, Align)]) -> Self {
        Table {
            headers: columns.iter().map(|(h, _)| h.to_string()).collect(),
            aligns: columns.iter().map(|(_, a)| *a).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are blank, extra cells are dropped.
    pub fn row(&mut self, cells: impl IntoIterator<Item = impl Into<String>>) -> &mut Self {
        let mut row: Vec<String> = cells.into_iter().map(Into::into).collect();
        row.resize(self.headers.len(), String::new());
        self.rows.push(row);
        self
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Renders the table, each line indented by `indent` spaces.
    pub fn render(&self, indent: usize) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain([self.headers[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let pad = " ".repeat(indent);
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = pad.clone();
            for (c, cell) in row.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                let fill = widths[c] - cell.chars().count();
                let last = c + 1 == row.len();
                match self.aligns[c] {
                    Align::Left if last => line.push_str(cell),
                    Align::Left => {
                        line.push_str(cell);
                        line.extend(std::iter::repeat_n(' ', fill));
                    }
                    Align::Right => {
                        line.extend(std::iter::repeat_n(' ', fill));
                        line.push_str(cell);
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let mut t = Table::new(&[("site", Align::Left), ("bytes", Align::Right)]);
        t.row(["forward (model.py:41)", "1.0 GiB"]);
        t.row(["x", "512 B"]);
        assert_eq!(
            t.render(2),
            "  site                     bytes\n  forward (model.py:41)  1.0 GiB\n  x                        512 B\n"
        );
    }
}

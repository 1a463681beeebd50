//! Splits a text file into records (lines; for CSV, lines joined while a quoted field is open),
//! keeping each record's byte offset and line number so errors can say where, and a reader can
//! resume from a recorded position.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use weir_engine::{EngineError, Result};

const READ_CHUNK: usize = 1 << 20;

/// Where a reader stands in a file: the next record starts at `offset`, on line `line` (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilePosition {
    pub offset: u64,
    pub line: u64,
}

impl FilePosition {
    pub const START: FilePosition = FilePosition { offset: 0, line: 1 };
}

/// A run of records copied out of the file, each ending with a newline.
#[derive(Debug, Default)]
pub struct Records {
    pub data: Vec<u8>,
    /// For each record: its byte range in `data` and its line number in the file.
    pub spans: Vec<(usize, usize, u64)>,
}

impl Records {
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn record(&self, i: usize) -> &[u8] {
        let (s, e, _) = self.spans[i];
        &self.data[s..e]
    }
}

/// Reads records in file order.
pub struct RecordReader {
    path: PathBuf,
    file: File,
    /// Unconsumed bytes; `buf[0]` is at `position`.
    buf: Vec<u8>,
    position: FilePosition,
    eof: bool,
    /// CSV: a newline inside double quotes does not end a record.
    quote_aware: bool,
    /// Bytes read at a time.
    chunk: usize,
}

impl RecordReader {
    /// Opens `path` and seeks to `position`.
    pub fn open(path: &Path, position: FilePosition, quote_aware: bool) -> Result<Self> {
        let mut file = File::open(path)
            .map_err(|e| EngineError::io(format!("cannot open '{}'", path.display()), e))?;
        file.seek(SeekFrom::Start(position.offset))
            .map_err(|e| EngineError::io(format!("cannot seek in '{}'", path.display()), e))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            buf: Vec::new(),
            position,
            eof: false,
            quote_aware,
            chunk: READ_CHUNK,
        })
    }

    /// The position of the next record not yet returned.
    pub fn position(&self) -> FilePosition {
        self.position
    }

    /// Reads up to `chunk` more bytes into `buf`'s spare room (not zeroed first).
    fn fill(&mut self) -> Result<()> {
        let n = (&mut self.file)
            .take(self.chunk as u64)
            .read_to_end(&mut self.buf)
            .map_err(|e| EngineError::io(format!("cannot read '{}'", self.path.display()), e))?;
        if n == 0 {
            self.eof = true;
        }
        Ok(())
    }

    /// Up to `max` records into `out` (emptied first, its buffers kept, so a reader of many
    /// batches allocates once); `false` at end of file. Blank lines are skipped.
    pub fn next_records(&mut self, max: usize, out: &mut Records) -> Result<bool> {
        out.data.clear();
        out.spans.clear();
        let mut pos = 0usize; // scan position in buf
        let mut record_start = 0usize;
        // Records from `run` to `record_start` are copied to `out.data` in one piece.
        let mut run = 0usize;
        let mut in_quotes = false;
        let mut line = self.position.line;
        let mut record_line = line;
        while out.len() < max {
            let newline = memchr::memchr(b'\n', &self.buf[pos..]);
            let (end, at_eof) = match newline {
                Some(i) => (pos + i + 1, false),
                None if self.eof => {
                    if record_start >= self.buf.len() {
                        break;
                    }
                    (self.buf.len(), true)
                }
                None => {
                    // Need more bytes: copy the run, drop what is consumed, then read.
                    out.data.extend_from_slice(&self.buf[run..record_start]);
                    run = record_start;
                    self.consume(&mut pos, &mut record_start, &mut run);
                    self.fill()?;
                    continue;
                }
            };
            if self.quote_aware {
                in_quotes ^= memchr::memchr_iter(b'"', &self.buf[pos..end]).count() % 2 == 1;
            }
            pos = end;
            if !at_eof {
                line += 1;
            }
            if in_quotes && !at_eof {
                continue;
            }
            let record = &self.buf[record_start..end];
            if record.iter().any(|b| !b.is_ascii_whitespace()) {
                let s = out.data.len() + (record_start - run);
                if at_eof && record.last() != Some(&b'\n') {
                    // The file's last record has no newline: one is added.
                    out.data.extend_from_slice(&self.buf[run..end]);
                    out.data.push(b'\n');
                    run = end;
                }
                out.spans
                    .push((s, out.data.len() + (end - run), record_line));
            } else {
                // A blank line: the run stops before it.
                out.data.extend_from_slice(&self.buf[run..record_start]);
                run = end;
            }
            record_start = end;
            record_line = line;
            in_quotes = false;
            if at_eof {
                break;
            }
        }
        out.data.extend_from_slice(&self.buf[run..record_start]);
        run = record_start;
        self.consume(&mut pos, &mut record_start, &mut run);
        self.position.line = record_line;
        Ok(!(out.is_empty() && self.eof && self.buf.is_empty()))
    }

    /// Drops the bytes before `record_start` from the buffer, advancing the position.
    fn consume(&mut self, pos: &mut usize, record_start: &mut usize, run: &mut usize) {
        let upto = *record_start;
        if upto == 0 {
            return;
        }
        self.buf.drain(..upto);
        self.position.offset += upto as u64;
        *pos -= upto;
        *record_start -= upto;
        *run -= upto;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(content: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content.as_bytes()).unwrap();
        f
    }

    fn next(r: &mut RecordReader, max: usize) -> Option<Records> {
        let mut out = Records::default();
        r.next_records(max, &mut out).unwrap().then_some(out)
    }

    fn lines(r: &Records) -> Vec<(String, u64)> {
        (0..r.len())
            .map(|i| {
                (
                    String::from_utf8(r.record(i).to_vec()).unwrap(),
                    r.spans[i].2,
                )
            })
            .collect()
    }

    #[test]
    fn splits_lines_keeps_line_numbers_and_resumes() {
        let f = file("a,1\nb,2\n\nc,3\nd,4");
        let mut r = RecordReader::open(f.path(), FilePosition::START, true).unwrap();
        let first = next(&mut r, 2).unwrap();
        assert_eq!(
            lines(&first),
            vec![("a,1\n".into(), 1), ("b,2\n".into(), 2)]
        );
        let pos = r.position();
        assert_eq!(pos, FilePosition { offset: 8, line: 3 });
        let rest = next(&mut r, 10).unwrap();
        assert_eq!(lines(&rest), vec![("c,3\n".into(), 4), ("d,4\n".into(), 5)]);
        assert!(next(&mut r, 10).is_none());

        let mut resumed = RecordReader::open(f.path(), pos, true).unwrap();
        let again = next(&mut resumed, 10).unwrap();
        assert_eq!(lines(&again), lines(&rest));
    }

    #[test]
    fn quoted_newlines_stay_in_one_record() {
        let f = file("1,\"two\nlines\"\n2,x\n");
        let mut r = RecordReader::open(f.path(), FilePosition::START, true).unwrap();
        let recs = next(&mut r, 10).unwrap();
        assert_eq!(
            lines(&recs),
            vec![("1,\"two\nlines\"\n".into(), 1), ("2,x\n".into(), 3)]
        );
    }

    /// Records read a few bytes at a time (every record and blank line split across reads)
    /// are the records read at once, at the same positions.
    #[test]
    fn reads_of_any_size_give_the_same_records() {
        let content = "h,x\n1,\"two\nlines\"\n\n  \n2,\"q\"\"\"\n3,z\n\n4,last";
        let f = file(content);
        let whole = {
            let mut r = RecordReader::open(f.path(), FilePosition::START, true).unwrap();
            lines(&next(&mut r, 100).unwrap())
        };
        assert_eq!(whole.len(), 5, "{whole:?}");
        assert_eq!(whole[4], ("4,last\n".into(), 9));
        for chunk in 1..8 {
            for max in 1..4 {
                let mut r = RecordReader::open(f.path(), FilePosition::START, true).unwrap();
                r.chunk = chunk;
                let mut got = Vec::new();
                while let Some(recs) = next(&mut r, max) {
                    got.extend(lines(&recs));
                    // Resuming at the position reads on from the same record.
                    let mut resumed = RecordReader::open(f.path(), r.position(), true).unwrap();
                    let rest = next(&mut resumed, 100)
                        .map(|r| lines(&r))
                        .unwrap_or_default();
                    assert_eq!(rest, whole[got.len()..], "chunk {chunk} max {max}");
                }
                assert_eq!(got, whole, "chunk {chunk} max {max}");
            }
        }
    }
}

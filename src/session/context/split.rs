//! A context printed in rendered pieces, its messages assembled on up to
//! two threads (`docs/engine.md`, "The lean first-time path"): the lean
//! first-time path prints contexts this way, never holding the whole text.
//!
//! The entries whose messages the context shows are cut into chunks of
//! about [`CONTEXT_CHUNK`] bytes of lines. The calling thread assembles
//! and renders the even chunks and writes everything, in order; a helper
//! thread assembles and renders the odd ones ahead into a buffer, each
//! one it takes before the calling thread reaches it: an odd chunk the
//! helper has not taken by then (it starts ~0.2 ms late here, or is kept
//! off its core) the calling thread assembles itself instead of waiting.
//! A chunk the helper renders
//! starts after a message (it opens with `,`, at the depth of the
//! messages array), which holds whenever a message was written before it;
//! in the rare case none was (every entry before it emitted nothing), the
//! calling thread assembles that chunk again itself. The concatenated
//! output is the one text [`super::build_session_context`] builds for the
//! same path, rendered.

#[cfg(test)]
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use super::messages::emit_messages;
use super::{ContextFold, LineSource, Plan, Read, EMPTY_STATE, OPEN};
use crate::session::error::{Error, Result};
use crate::session::json::pretty_append;

/// Bytes of entry lines per chunk (the helper's lead, and the memory its
/// buffers hold, is about twice this).
pub(crate) const CONTEXT_CHUNK: u64 = 128 << 10;
/// Chunks the helper thread assembled that were written (for the tests).
#[cfg(test)]
pub(crate) static HELPER_CHUNKS: AtomicUsize = AtomicUsize::new(0);

/// Compact text assembled before it is rendered and written.
const PIECE: usize = 64 << 10;

/// Where a rendered context goes, in pieces.
pub trait TextSink {
    /// Takes a piece of the text.
    fn write(&mut self, bytes: &[u8]) -> Result<()>;

    /// Takes a piece of the text in its buffer, and gives back a buffer
    /// (empty) to render the next piece into: the same one when the piece
    /// was written out (the default), a fresh one when the sink keeps
    /// the buffer (the mount keeps the pieces of `context.json`, so that
    /// no byte is copied twice and each thread touches the fresh memory
    /// of its own pieces).
    fn take(&mut self, mut buf: Vec<u8>) -> Result<Vec<u8>> {
        self.write(&buf)?;
        buf.clear();
        Ok(buf)
    }
}

/// A [`TextSink`] over a writer.
pub struct WriteSink<'a>(pub &'a mut dyn std::io::Write);

impl TextSink for WriteSink<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.0
            .write_all(bytes)
            .map_err(|e| Error::io("<output>", e))
    }
}
/// The pretty printer's depth between two messages: inside the object
/// and its `messages` array.
const MESSAGE_DEPTH: usize = 2;

/// How pieces of compact text become output.
#[derive(Debug, Clone, Copy)]
struct Render {
    pretty: bool,
}

impl Render {
    /// Appends the rendering of `piece` (printed from depth `indent`) to
    /// `out`; returns the depth at its end.
    fn append(self, piece: &str, indent: usize, out: &mut Vec<u8>) -> usize {
        if self.pretty {
            pretty_append(piece, indent, out)
        } else {
            out.extend_from_slice(piece.as_bytes());
            indent
        }
    }
}

/// A chunk rendered by the helper: its number, its text, the messages it
/// holds and the depth its rendering ends at.
struct Done {
    chunk: usize,
    text: Vec<u8>,
    messages: usize,
    indent: usize,
}

/// What [`write_context_rendered`] printed: the fold at the path's last
/// entry (none for the empty context), from which
/// [`super::extend_path`] continues, and where the text after the last
/// message begins (bytes printed before it, the printer's depth there):
/// the last piece is all of that text (`]` and the members after
/// `messages`), what an extension prints again.
pub(crate) struct Rendered {
    pub(crate) fold: Option<ContextFold>,
    pub(crate) cut: (usize, usize),
}

/// The context of the [`plan`](super::plan) of a path (`None`: the empty context),
/// compact or pretty (`pretty`; without the final newline), given to `out`
/// in pieces of rendered text; with `threads` above 1, a helper thread
/// assembles and renders chunks of about `chunk_bytes` bytes of lines
/// ([`CONTEXT_CHUNK`]) ahead (see the module's comment).
pub(crate) fn write_context_rendered(
    plan: Option<Plan>,
    src: &(dyn LineSource + Sync),
    pretty: bool,
    (threads, chunk_bytes): (usize, u64),
    out: &mut dyn TextSink,
) -> Result<Rendered> {
    let render = Render { pretty };
    let Some(Plan {
        state,
        reads,
        compaction,
        leaf,
    }) = plan
    else {
        let mut text = Vec::new();
        render.append(&format!("{OPEN}],{EMPTY_STATE}}}"), 0, &mut text);
        out.write(&text)?;
        return Ok(Rendered {
            fold: None,
            cut: (0, 0),
        });
    };
    let chunks = chunks(&reads, chunk_bytes);
    let mut w = Writer {
        json: String::with_capacity(PIECE + (4 << 10)),
        messages: 0,
        sink: Sink {
            render,
            text: Vec::with_capacity(PIECE + PIECE / 2),
            indent: 0,
            printed: 0,
            out,
        },
    };
    w.json.push_str(OPEN);
    if threads < 2 || chunks.len() < 2 {
        w.chunk(&reads, compaction, src)?;
    } else {
        // Whether each chunk was taken (by the helper, or by the writer
        // before the helper came to it).
        let taken: Vec<AtomicBool> = chunks.iter().map(|_| AtomicBool::new(false)).collect();
        std::thread::scope(|scope| -> Result<()> {
            let (done_tx, done_rx) = mpsc::sync_channel::<Result<Done>>(1);
            let (free_tx, free_rx) = mpsc::channel::<Vec<u8>>();
            let (taken, chunks, reads) = (&taken, &chunks, &reads);
            scope.spawn(move || {
                let mut json = String::with_capacity(PIECE + (4 << 10));
                let mut buffers = 0;
                for (chunk, range) in chunks.iter().enumerate().skip(1).step_by(2) {
                    if taken[chunk].swap(true, Ordering::SeqCst) {
                        // The writer came first.
                        continue;
                    }
                    let chunk_reads = &reads[range.clone()];
                    // Two buffers go round (one filled here, one written):
                    // fresh big blocks would cost a page fault per page.
                    let text = match free_rx.try_recv() {
                        Ok(text) => text,
                        Err(_) if buffers < 2 => {
                            buffers += 1;
                            Vec::with_capacity(2 * chunk_bytes.min(CONTEXT_CHUNK) as usize)
                        }
                        Err(_) => match free_rx.recv() {
                            Ok(text) => text,
                            // The writer stopped early.
                            Err(_) => return,
                        },
                    };
                    let done = assemble_alone(
                        render,
                        chunk,
                        chunk_reads,
                        compaction,
                        src,
                        &mut json,
                        text,
                    );
                    let failed = done.is_err();
                    // The receiver is gone when the writer stopped early.
                    if done_tx.send(done).is_err() || failed {
                        return;
                    }
                }
            });
            for (k, range) in chunks.iter().enumerate() {
                let chunk_reads = &reads[range.clone()];
                if k % 2 == 0 || !taken[k].swap(true, Ordering::SeqCst) {
                    w.chunk(chunk_reads, compaction, src)?;
                    continue;
                }
                let done = done_rx
                    .recv()
                    .map_err(|_| Error::Internal("the context helper thread stopped".into()))??;
                debug_assert_eq!(done.chunk, k);
                if w.messages == 0 || (pretty && w.sink.indent != MESSAGE_DEPTH) {
                    // Nothing before it ended a message: assembled again here,
                    // where the text so far is.
                    w.chunk(chunk_reads, compaction, src)?;
                } else if done.messages > 0 {
                    #[cfg(test)]
                    HELPER_CHUNKS.fetch_add(1, Ordering::Relaxed);
                    let back = w.sink.take(done.text)?;
                    w.messages += done.messages;
                    w.sink.indent = done.indent;
                    let _ = free_tx.send(back);
                    continue;
                }
                let _ = free_tx.send(done.text);
            }
            Ok(())
        })?;
    }
    // Every chunk ended by writing its last message: the text left is the
    // opening alone (no message at all), or nothing.
    let cut = (w.sink.printed, w.sink.indent);
    w.json.push(']');
    state.write_tail(&mut w.json);
    w.sink.flush(&mut w.json)?;
    Ok(Rendered {
        fold: Some(ContextFold {
            state,
            leaf,
            message_count: w.messages,
        }),
        cut,
    })
}

/// The chunks of `reads`: consecutive ranges of about `chunk` bytes of
/// lines each (at least one entry).
fn chunks(reads: &[Read], chunk: u64) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0u64;
    for (k, r) in reads.iter().enumerate() {
        bytes += u64::from(r.len);
        if bytes >= chunk {
            out.push(start..k + 1);
            start = k + 1;
            bytes = 0;
        }
    }
    if start < reads.len() {
        out.push(start..reads.len());
    }
    out
}

/// The writing thread's state: the compact text not yet rendered, the
/// messages written, and where rendered text goes.
struct Writer<'o> {
    json: String,
    messages: usize,
    sink: Sink<'o>,
}

/// Renders compact text and writes it: the rendering buffer, the
/// printer's depth and the bytes written.
struct Sink<'o> {
    render: Render,
    text: Vec<u8>,
    indent: usize,
    printed: usize,
    out: &'o mut dyn TextSink,
}

impl Writer<'_> {
    /// Assembles the messages of `reads` after the text so far, writing
    /// whole pieces; at the end of the chunk, everything up to its last
    /// message is written.
    fn chunk(
        &mut self,
        reads: &[Read],
        compaction: Option<u32>,
        src: &dyn LineSource,
    ) -> Result<()> {
        let sink = &mut self.sink;
        emit_messages(
            reads,
            compaction,
            src,
            &mut self.json,
            &mut self.messages,
            &mut |json| {
                if json.len() >= PIECE {
                    sink.flush(json)?;
                }
                Ok(())
            },
        )?;
        // A chunk ends after a message (the text holds none yet when only
        // the opening is there: it waits for the first message).
        if self.messages > 0 && !self.json.is_empty() {
            self.sink.flush(&mut self.json)?;
        }
        Ok(())
    }
}

impl Sink<'_> {
    /// Renders `json`, writes it and clears it.
    fn flush(&mut self, json: &mut String) -> Result<()> {
        self.text.clear();
        self.indent = self.render.append(json, self.indent, &mut self.text);
        json.clear();
        let text = std::mem::take(&mut self.text);
        self.text = self.take(text)?;
        Ok(())
    }

    /// Writes rendered text in its buffer: a buffer to fill next.
    fn take(&mut self, text: Vec<u8>) -> Result<Vec<u8>> {
        self.printed += text.len();
        self.out.take(text)
    }
}

/// Assembles and renders the messages of `reads` on their own, as if a
/// message came before them, into `text` (`json`: scratch space).
fn assemble_alone(
    render: Render,
    chunk: usize,
    reads: &[Read],
    compaction: Option<u32>,
    src: &dyn LineSource,
    json: &mut String,
    mut text: Vec<u8>,
) -> Result<Done> {
    text.clear();
    json.clear();
    // One message "before": each message of the chunk opens with `,`.
    let mut count = 1;
    let mut indent = MESSAGE_DEPTH;
    emit_messages(reads, compaction, src, json, &mut count, &mut |json| {
        if json.len() >= PIECE {
            indent = render.append(json, indent, &mut text);
            json.clear();
        }
        Ok(())
    })?;
    indent = render.append(json, indent, &mut text);
    Ok(Done {
        chunk,
        text,
        messages: count - 1,
        indent,
    })
}

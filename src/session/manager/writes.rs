//! Appending to a session (`docs/engine.md`, "Appends"): the checks
//! against the session, the entry assembled under the leaf, and where its
//! line goes (memory, the first write, or an append to the file); the
//! typed appends of the entry kinds (`docs/format.md`, "Entries"); and
//! flushing.

use serde_json::{Map, Value};

use super::journal::{Freshness, Landed, Looked};
use super::Session;
use crate::session::append::{assemble, NewEntry};
use crate::session::error::{Error, Result};
use crate::session::format::{scan_line, EntryKind, Facts, LineKind, Role};
use crate::session::ids::new_entry_id;
use crate::session::json::to_js_line;
use crate::session::sizecontrol::apply_size_controls;
use crate::session::time::now_iso;

/// Where a new entry hangs: decided after other writers' lines are picked
/// up.
#[derive(Debug, Clone, Copy)]
enum Parent<'a> {
    /// The leaf (wherever those lines moved it).
    Leaf,
    /// This entry (`None`: a new root).
    Entry(Option<&'a str>),
}

impl Session {
    /// The last failed write, if the writes since have not succeeded. It
    /// does not block later writes (see `docs/reliability.md`).
    pub fn persistence_error(&self) -> Option<&crate::session::error::Error> {
        self.journal.last_failure()
    }

    /// Checks what needs the session before an append: label and
    /// compaction targets exist, and a supplied `branch_summary.fromId` is
    /// `leaf_id` (the entry the new one will hang under; `"root"` for none).
    pub fn validate_new_entry(&self, entry: &NewEntry, leaf_id: Option<&str>) -> Result<()> {
        let field = |key: &str| entry.fields.get(key).and_then(Value::as_str);
        match entry.kind {
            EntryKind::Label => {
                if let Some(t) = field("targetId") {
                    self.position(t)?;
                }
            }
            EntryKind::Compaction => {
                if let Some(t) = field("firstKeptEntryId") {
                    self.position(t)?;
                }
            }
            EntryKind::BranchSummary => {
                let expected = leaf_id.unwrap_or("root");
                if let Some(given) = field("fromId") {
                    if given != expected {
                        return Err(Error::Invalid(format!(
                            "branch_summary.fromId is \"{given}\" but the leaf is \"{expected}\""
                        )));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Validates against the session and fills in `branch_summary.fromId`.
    fn check_against_session(&self, entry: &mut NewEntry) -> Result<()> {
        let leaf = self.leaf_id().map(str::to_string);
        self.validate_new_entry(entry, leaf.as_deref())?;
        if entry.kind == EntryKind::BranchSummary && !entry.fields.contains_key("fromId") {
            // fromId goes first among the fields.
            let mut fields = Map::with_capacity(entry.fields.len() + 1);
            fields.insert(
                "fromId".into(),
                Value::String(leaf.unwrap_or_else(|| "root".into())),
            );
            fields.extend(std::mem::take(&mut entry.fields));
            entry.fields = fields;
        }
        Ok(())
    }

    fn fresh_entry_id(&self) -> String {
        loop {
            let id = new_entry_id();
            if self.index.position(&id).is_none() {
                return id;
            }
        }
    }

    /// Appends an entry as a child of the leaf and makes it the leaf.
    /// Returns the new entry's id. On error nothing changes (a failed write
    /// leaves no partial line behind; see `docs/reliability.md`).
    pub fn append(&mut self, entry: NewEntry) -> Result<String> {
        self.append_to(entry, Parent::Leaf)
    }

    /// Appends an entry as a child of `parent` (`None`: a new root) and
    /// makes it the leaf. The parent is set after other writers' lines are
    /// picked up, so it is exactly `parent` whatever they appended (see
    /// `batch::append_batch_under`). On error nothing is written and the
    /// leaf stays where it was.
    pub fn append_under(&mut self, parent: Option<&str>, entry: NewEntry) -> Result<String> {
        self.append_to(entry, Parent::Entry(parent))
    }

    /// The one append: refuse when read-only, pick up what other writers
    /// did — so the parent is decided on the file as it is now — then
    /// write (`docs/engine.md`, "Appends"). A session whose file holds it
    /// looks at the file once, under the write locks, right before its
    /// write; the others (in memory, before the first write, migrated in
    /// memory) refresh first and write a migration held in memory.
    fn append_to(&mut self, mut entry: NewEntry, parent: Parent<'_>) -> Result<String> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        if !self.journal.is_on_disk() {
            self.prepare_append()?;
        }
        if !self.journal.is_on_disk() {
            let before = self.leaf;
            self.place(parent)?;
            let result = self.append_at_leaf(entry);
            if result.is_err() {
                self.leaf = before;
            }
            return result;
        }
        // Checked against the session as last seen before anything is
        // stored (a bad entry stores no blob), and for good under the locks
        // below. A miss may be about lines not picked up yet: only after a
        // look at the file is it final.
        if self.precheck(&entry, parent).is_err() {
            self.refresh()?;
            if !self.journal.is_on_disk() {
                return self.append_to(entry, parent);
            }
            self.precheck(&entry, parent)?;
        }
        // Images to the blob store and long strings cut, outside the locks:
        // neither depends on where the entry hangs.
        self.store_content(&mut entry)?;
        let mut attempts = 0;
        let lock = loop {
            let looked =
                self.journal
                    .begin_append(&mut self.index, &mut self.report, self.max_line);
            match looked {
                Ok(Looked::Ready { lock, indexed }) => {
                    if indexed > 0 {
                        self.leaf = self.last_position();
                    }
                    break lock;
                }
                Ok(Looked::Changed(how)) => {
                    attempts += 1;
                    if attempts > Self::MAX_LOADS_PER_APPEND {
                        let path = self.journal.require_path()?.to_path_buf();
                        return Err(self.journal.failed(Error::Conflict {
                            path,
                            reason: "the file kept changing while appending; nothing was written"
                                .into(),
                        }));
                    }
                    if let Some(path) = self.journal.path() {
                        let what = match how {
                            Freshness::ChangedInPlace => "changed in place",
                            _ => "replaced or shrunk",
                        };
                        log::info!(
                            "{}: {what} before an append; loading it again",
                            path.display()
                        );
                    }
                    self.reload()?;
                    if !self.journal.is_on_disk() {
                        // Now an old version or an empty file: the path of
                        // sessions that are not on disk.
                        return self.append_to(entry, parent);
                    }
                }
                Err(e) => return Err(self.journal.failed(e)),
            }
        };
        let before = self.leaf;
        let placed = self
            .place(parent)
            .and_then(|()| self.check_against_session(&mut entry));
        if let Err(e) = placed {
            self.leaf = before;
            return Err(e);
        }
        let id = self.fresh_entry_id();
        let line = to_js_line(&assemble(entry, &id, self.leaf_id(), &now_iso()));
        let LineKind::Entry(scanned) = scan_line(line.as_bytes()) else {
            self.leaf = before;
            return Err(Error::Internal("assembled entry does not scan".into()));
        };
        let landed = self.journal.append_locked(
            lock,
            line.as_bytes(),
            scanned,
            &mut self.index,
            &mut self.report,
            self.max_line,
        );
        match landed {
            Ok(landed) => match self.landed(landed) {
                Ok(()) => {
                    self.journal.succeeded();
                    Ok(id)
                }
                Err(e) => Err(self.journal.failed(e)),
            },
            Err(e) => {
                self.leaf = before;
                Err(self.journal.failed(e))
            }
        }
    }

    /// How often an append loads a file that changed under it before it
    /// gives up (another writer replacing it again and again).
    const MAX_LOADS_PER_APPEND: usize = 3;

    /// Checks `entry` against the session as it is, hanging under
    /// `parent`; the leaf does not move.
    fn precheck(&mut self, entry: &NewEntry, parent: Parent<'_>) -> Result<()> {
        let before = self.leaf;
        let checked = self
            .place(parent)
            .and_then(|()| self.validate_new_entry(entry, self.leaf_id()));
        self.leaf = before;
        checked
    }

    /// Moves the leaf to where a new entry hangs.
    fn place(&mut self, parent: Parent<'_>) -> Result<()> {
        if let Parent::Entry(parent) = parent {
            self.leaf = match parent {
                Some(id) => Some(self.position(id)?),
                None => None,
            };
        }
        Ok(())
    }

    /// What every append to a session whose file does not hold it does
    /// first: pick up what other writers created (or changed, for a file
    /// migrated in memory), and write a migration held in memory.
    fn prepare_append(&mut self) -> Result<()> {
        if self.journal.is_persistent() {
            self.refresh()?;
            if self.journal.is_migrated_in_memory() {
                if let Err(e) = self.write_migration() {
                    return Err(self.journal.failed(e));
                }
            }
        }
        Ok(())
    }

    /// The entry's content as it is stored in a file: images moved to the
    /// blob store, over-long strings cut (`docs/format.md`, "Size limits on
    /// write"). In-memory sessions keep it as it is.
    fn store_content(&self, entry: &mut NewEntry) -> Result<()> {
        if !self.journal.is_persistent() {
            return Ok(());
        }
        let mut fields = Value::Object(std::mem::take(&mut entry.fields));
        // The size controls leave the image payloads alone, so the images
        // found next are those of the entry as given.
        let payloads: Option<&crate::session::sizecontrol::PayloadTest> = match self.blobs {
            Some(_) => Some(&crate::session::blobs::becomes_blob),
            None => None,
        };
        apply_size_controls(&mut fields, payloads);
        let stored = match &self.blobs {
            Some(blobs) => blobs.externalize_images(&mut fields).map(drop),
            None => Ok(()),
        };
        if let Value::Object(map) = fields {
            entry.fields = map;
        }
        stored
    }

    /// An append to a session whose file does not hold it (see
    /// [`Session::append_to`]): the entry hangs under the leaf as it is now
    /// and is kept in memory, or written with the header by the first write.
    fn append_at_leaf(&mut self, mut entry: NewEntry) -> Result<String> {
        self.check_against_session(&mut entry)?;
        self.store_content(&mut entry)?;
        let id = self.fresh_entry_id();
        let line = to_js_line(&assemble(entry, &id, self.leaf_id(), &now_iso()));
        let LineKind::Entry(scanned) = scan_line(line.as_bytes()) else {
            return Err(Error::Internal("assembled entry does not scan".into()));
        };
        let is_assistant = matches!(
            &scanned.facts,
            Facts::Message {
                role: Role::Assistant,
                ..
            }
        );
        if !self.journal.is_persistent()
            || (!self.journal.write_through() && !is_assistant && !self.index.has_assistant())
        {
            // In memory: in-memory sessions, and persistent ones before their
            // first assistant message (unless written through).
            let loc = self.journal.push_memory_line(line.as_bytes());
            self.leaf = Some(self.index.push(scanned, loc));
            return Ok(id);
        }
        // The first write: the header, the entries held so far, this one.
        let written = self
            .journal
            .write_first(&mut self.index, Some((line.as_bytes(), scanned)));
        match written {
            Ok(position) => self.leaf = position,
            Err(e) => return Err(self.journal.failed(e)),
        }
        if let Err(e) = self.journal.note_last_line(&self.index) {
            return Err(self.journal.failed(e));
        }
        self.journal.succeeded();
        Ok(id)
    }

    /// Moves the leaf after an append (see
    /// [`super::journal::Journal::append_locked`]): to the last entry when
    /// other writers' lines were indexed, to ours when it is the last line.
    fn landed(&mut self, landed: Landed) -> Result<()> {
        if landed.indexed > 0 {
            self.leaf = self.last_position();
        }
        match landed.position {
            Some(i) => {
                if landed.last {
                    self.leaf = Some(i);
                }
                Ok(())
            }
            None => {
                log::error!(
                    "{}: the line appended at {} was not found there; loading the file again",
                    self.path()
                        .map_or_else(String::new, |p| p.display().to_string()),
                    landed.at
                );
                self.reload()
            }
        }
    }

    /// Writes the session's file now if it is not written yet: the header
    /// and any entries held in memory (`sessionfs new`).
    pub fn write_now(&mut self) -> Result<()> {
        if !matches!(self.journal.backing(), super::journal::Backing::Deferred) {
            return Ok(());
        }
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        if let Err(e) = self.journal.write_first(&mut self.index, None) {
            return Err(self.journal.failed(e));
        }
        self.journal.note_last_line(&self.index)
    }

    /// Writes everything queued and fsyncs the session file.
    pub fn flush(&mut self) -> Result<()> {
        if !self.journal.is_on_disk() || self.read_only {
            return Ok(());
        }
        let result = self.journal.fsync();
        result.map_err(|e| self.journal.failed(e))
    }

    // -----------------------------------------------------------------
    // Typed appends (`docs/format.md`, "Entries"): the entries are built
    // by the constructors of [`NewEntry`].
    // -----------------------------------------------------------------

    /// Appends a `message` entry.
    pub fn append_message(&mut self, message: Value) -> Result<String> {
        self.append(NewEntry::message(message))
    }
    /// Appends a `thinking_level_change`.
    pub fn append_thinking_level_change(&mut self, level: &str) -> Result<String> {
        self.append(NewEntry::thinking_level_change(level))
    }
    /// Appends a `model_change` (`model` is `provider/id`).
    pub fn append_model_change(&mut self, model: &str, role: Option<&str>) -> Result<String> {
        self.append(NewEntry::model_change(model, role))
    }
    /// Appends a `compaction`.
    #[allow(clippy::too_many_arguments)]
    pub fn append_compaction(
        &mut self,
        summary: &str,
        short_summary: Option<&str>,
        first_kept_entry_id: &str,
        tokens_before: u64,
        details: Option<Value>,
        preserve_data: Option<Value>,
        from_extension: Option<bool>,
    ) -> Result<String> {
        self.append(NewEntry::compaction(crate::session::append::Compaction {
            summary,
            short_summary,
            first_kept_entry_id,
            tokens_before,
            details,
            preserve_data,
            from_extension,
        }))
    }
    /// Appends a `custom` entry.
    pub fn append_custom(&mut self, custom_type: &str, data: Option<Value>) -> Result<String> {
        self.append(NewEntry::custom(custom_type, data))
    }
    /// Appends a `custom_message`.
    pub fn append_custom_message(
        &mut self,
        custom_type: &str,
        content: Value,
        display: bool,
        details: Option<Value>,
    ) -> Result<String> {
        self.append(NewEntry::custom_message(
            custom_type,
            content,
            display,
            details,
        ))
    }
    /// Appends a `ttsr_injection`.
    pub fn append_ttsr_injection(&mut self, rules: &[&str]) -> Result<String> {
        self.append(NewEntry::ttsr_injection(rules))
    }
    /// Appends a `session_init`.
    pub fn append_session_init(
        &mut self,
        system_prompt: &str,
        task: &str,
        tools: &[&str],
        output_schema: Option<Value>,
    ) -> Result<String> {
        self.append(NewEntry::session_init(
            system_prompt,
            task,
            tools,
            output_schema,
        ))
    }
    /// Appends a `mode_change`.
    pub fn append_mode_change(&mut self, mode: &str, data: Option<Value>) -> Result<String> {
        self.append(NewEntry::mode_change(mode, data))
    }
    /// Appends a `label` entry as a child of the leaf, and sets (or, with
    /// `None` or an empty label, clears) the label; the target must exist
    /// (checked with the append's other checks, so it may be a line
    /// another writer appended since the last look).
    pub fn append_label_change(&mut self, target_id: &str, label: Option<&str>) -> Result<String> {
        self.append(NewEntry::label(target_id, label))
    }
    /// Moves the leaf to `id` (validated; `None` resets it) and appends a
    /// `branch_summary` whose `fromId` is `id` or `"root"`. Other writers'
    /// lines are read first; the summary then hangs under `id` even if they
    /// moved the leaf. On error the leaf does not move.
    pub fn branch_with_summary(
        &mut self,
        id: Option<&str>,
        summary: &str,
        details: Option<Value>,
        from_extension: Option<bool>,
    ) -> Result<String> {
        self.append_to(
            NewEntry::branch_summary(id.unwrap_or("root"), summary, details, from_extension),
            Parent::Entry(id),
        )
    }
}

//! Appending to a session (`docs/engine.md`, "Appends"): the checks
//! against the session, the entry assembled under the leaf, and where its
//! line goes (memory, the first write, or an append to the file); the
//! typed appends of the entry kinds (`docs/format.md`, "Entries"); and
//! flushing.

use serde_json::{Map, Value};

use super::Session;
use crate::session::append::{assemble, NewEntry};
use crate::session::error::{Error, Result};
use crate::session::format::{scan_line, EntryKind, Facts, LineKind, Role};
use crate::session::ids::new_entry_id;
use crate::session::sizecontrol::apply_size_controls;
use crate::session::time::now_iso;

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
        self.prepare_append()?;
        self.append_at_leaf(entry)
    }

    /// Appends an entry as a child of `parent` (`None`: a new root) and
    /// makes it the leaf. The parent is set after other writers' lines are
    /// picked up, so it is exactly `parent` whatever they appended (see
    /// `batch::append_batch_under`). On error nothing is written.
    pub fn append_under(&mut self, parent: Option<&str>, entry: NewEntry) -> Result<String> {
        self.prepare_append()?;
        self.leaf = match parent {
            Some(id) => Some(self.position(id)?),
            None => None,
        };
        self.append_at_leaf(entry)
    }

    /// What every append does first: refuse when read-only, pick up what
    /// other writers appended (or created), so the parent is decided on
    /// the file as it is now, and write a migration held in memory.
    pub(super) fn prepare_append(&mut self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
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

    /// The rest of [`Session::append`], after [`Session::prepare_append`]:
    /// the entry hangs under the leaf as it is now.
    pub(super) fn append_at_leaf(&mut self, mut entry: NewEntry) -> Result<String> {
        self.check_against_session(&mut entry)?;
        let id = self.fresh_entry_id();
        let mut value = assemble(entry, &id, self.leaf_id(), &now_iso());
        let persistent = self.journal.is_persistent();
        if persistent {
            if let Some(blobs) = &self.blobs {
                blobs.externalize_images(&mut value)?;
            }
            apply_size_controls(&mut value);
        }
        let line = value.to_string();
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
        let on_disk = self.journal.is_on_disk();
        if !persistent
            || (!on_disk
                && !self.journal.write_through()
                && !is_assistant
                && !self.index.has_assistant())
        {
            // In memory: in-memory sessions, and persistent ones before their
            // first assistant message (unless written through).
            let loc = self.journal.push_memory_line(line.as_bytes());
            self.leaf = Some(self.index.push(scanned, loc));
            return Ok(id);
        }
        if !on_disk {
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
            return Ok(id);
        }
        match self.append_line(line.as_bytes(), &id) {
            Ok(()) => {
                self.journal.succeeded();
                Ok(id)
            }
            Err(e) => Err(self.journal.failed(e)),
        }
    }

    /// Appends the line of entry `id` to the file (see
    /// [`super::journal::Journal::append_line`]) and moves the leaf: to the
    /// last entry when lines were indexed, to ours when it is the last line.
    fn append_line(&mut self, line: &[u8], id: &str) -> Result<()> {
        let landed =
            self.journal
                .append_line(line, id, &mut self.index, &mut self.report, self.max_line)?;
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
    /// Validates the target, appends a `label` entry as a child of the
    /// leaf, and sets (or, with `None` or an empty label, clears) the label.
    pub fn append_label_change(&mut self, target_id: &str, label: Option<&str>) -> Result<String> {
        self.position(target_id)?;
        self.append(NewEntry::label(target_id, label))
    }
    /// Moves the leaf to `id` (validated; `None` resets it) and appends a
    /// `branch_summary` whose `fromId` is `id` or `"root"`. On error the
    /// leaf does not move.
    pub fn branch_with_summary(
        &mut self,
        id: Option<&str>,
        summary: &str,
        details: Option<Value>,
        from_extension: Option<bool>,
    ) -> Result<String> {
        // Other writers' lines are read first; the summary then hangs under
        // `id` even if they moved the leaf.
        self.prepare_append()?;
        let target = match id {
            Some(id) => Some(self.position(id)?),
            None => None,
        };
        let before = self.leaf;
        self.leaf = target;
        let result = self.append_at_leaf(NewEntry::branch_summary(
            id.unwrap_or("root"),
            summary,
            details,
            from_extension,
        ));
        if result.is_err() {
            self.leaf = before;
        }
        result
    }
}

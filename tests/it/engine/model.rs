//! Property test: random sequences of appends, branches, resets, summaries,
//! labels and compactions; the engine's context, tree and labels equal those
//! of a deliberately simple model that keeps every entry as a JSON value.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{json, Map, Value};
use sessionfs::session::parse_iso_ms;
use sessionfs::session::AgentDir;
use sessionfs::session::{LeafSel, Session};
use sessionfs::session::{MemoryStorage, Storage};

#[derive(Debug, Clone)]
enum Op {
    User(String),
    Assistant(u8),
    Thinking(u8),
    Model(u8, Option<u8>),
    Ttsr(Vec<u8>),
    Mode(u8, bool),
    CustomMessage(String),
    Custom,
    SessionInit,
    Branch(usize),
    Reset,
    Summary(Option<usize>, bool),
    Label(usize, Option<u8>),
    Compaction(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => "[a-z ]{0,8}".prop_map(Op::User),
        4 => (0u8..3).prop_map(Op::Assistant),
        1 => (0u8..3).prop_map(Op::Thinking),
        1 => (0u8..3, proptest::option::of(0u8..2)).prop_map(|(m, r)| Op::Model(m, r)),
        1 => proptest::collection::vec(0u8..4, 0..3).prop_map(Op::Ttsr),
        1 => (0u8..2, any::<bool>()).prop_map(|(m, d)| Op::Mode(m, d)),
        1 => "[a-z]{0,5}".prop_map(Op::CustomMessage),
        1 => Just(Op::Custom),
        1 => Just(Op::SessionInit),
        3 => any::<usize>().prop_map(Op::Branch),
        1 => Just(Op::Reset),
        2 => (proptest::option::of(any::<usize>()), any::<bool>()).prop_map(|(t, e)| Op::Summary(t, e)),
        2 => (any::<usize>(), proptest::option::of(0u8..3)).prop_map(|(t, l)| Op::Label(t, l)),
        2 => any::<usize>().prop_map(Op::Compaction),
    ]
}

/// The model: every entry as the JSON the engine stored, plus a leaf.
#[derive(Default)]
struct Model {
    entries: Vec<Value>,
    leaf: Option<String>,
}

impl Model {
    fn by_id(&self, id: &str) -> Option<&Value> {
        self.entries.iter().rev().find(|e| e["id"] == id)
    }

    fn path(&self, leaf: &str) -> Vec<&Value> {
        let mut path = Vec::new();
        let mut seen = HashSet::new();
        let mut cur = self.by_id(leaf);
        while let Some(e) = cur {
            let id = e["id"].as_str().unwrap().to_string();
            if !seen.insert(id) {
                break;
            }
            path.push(e);
            cur = e["parentId"].as_str().and_then(|p| self.by_id(p));
        }
        path.reverse();
        path
    }

    fn context(&self, leaf: Option<&str>) -> Value {
        let empty = json!({"messages":[],"thinkingLevel":"off","models":{},"injectedTtsrRules":[],"mode":"none"});
        let Some(leaf) = leaf else { return empty };
        let leaf = if self.by_id(leaf).is_some() {
            leaf.to_string()
        } else if let Some(last) = self.entries.last() {
            last["id"].as_str().unwrap().to_string()
        } else {
            return empty;
        };
        let path = self.path(&leaf);
        let mut thinking = json!("off");
        let mut models = Map::new();
        let mut explicit_default = false;
        let mut rules: Vec<Value> = Vec::new();
        let mut mode = json!("none");
        let mut mode_data: Option<Value> = None;
        for e in &path {
            match e["type"].as_str().unwrap() {
                "thinking_level_change" => thinking = e["thinkingLevel"].clone(),
                "model_change" => {
                    let role = e["role"].as_str().unwrap_or("default").to_string();
                    explicit_default |= role == "default";
                    models.insert(role, e["model"].clone());
                }
                "message" if e["message"]["role"] == "assistant" && !explicit_default => {
                    let m = format!(
                        "{}/{}",
                        e["message"]["provider"].as_str().unwrap(),
                        e["message"]["model"].as_str().unwrap()
                    );
                    models.insert("default".into(), json!(m));
                }
                "ttsr_injection" => {
                    for r in e["injectedRules"].as_array().unwrap() {
                        if !rules.contains(r) {
                            rules.push(r.clone());
                        }
                    }
                }
                "mode_change" => {
                    mode = e["mode"].clone();
                    mode_data = e.get("data").cloned();
                }
                _ => {}
            }
        }
        let ts = |e: &Value| json!(parse_iso_ms(e["timestamp"].as_str().unwrap()));
        let message = |e: &Value| -> Option<Value> {
            match e["type"].as_str().unwrap() {
                "message" => Some(e["message"].clone()),
                "custom_message" => {
                    let mut m = json!({"role":"custom","customType":e["customType"],"content":e["content"],"display":e["display"]});
                    if let Some(d) = e.get("details") {
                        m["details"] = d.clone();
                    }
                    m["timestamp"] = ts(e);
                    Some(m)
                }
                "branch_summary" if e["summary"].as_str().is_some_and(|s| !s.is_empty()) => Some(
                    json!({"role":"branchSummary","summary":e["summary"],"fromId":e["fromId"],"timestamp":ts(e)}),
                ),
                _ => None,
            }
        };
        let mut messages = Vec::new();
        match path.iter().rposition(|e| e["type"] == "compaction") {
            Some(c) => {
                let comp = path[c];
                messages.push(json!({"role":"compactionSummary","summary":comp["summary"],"tokensBefore":comp["tokensBefore"],"timestamp":ts(comp)}));
                if let Some(start) = path[..c]
                    .iter()
                    .position(|e| e["id"] == comp["firstKeptEntryId"])
                {
                    messages.extend(path[start..c].iter().filter_map(|e| message(e)));
                }
                messages.extend(path[c + 1..].iter().filter_map(|e| message(e)));
            }
            None => messages.extend(path.iter().filter_map(|e| message(e))),
        }
        let mut ctx = json!({"messages":messages,"thinkingLevel":thinking,"models":models,"injectedTtsrRules":rules,"mode":mode});
        if let Some(d) = mode_data {
            ctx["modeData"] = d;
        }
        ctx
    }

    fn labels(&self) -> Vec<(String, String)> {
        let mut map: HashMap<String, String> = HashMap::new();
        for e in &self.entries {
            if e["type"] == "label" {
                let t = e["targetId"].as_str().unwrap().to_string();
                match e["label"].as_str().filter(|l| !l.is_empty()) {
                    Some(l) => {
                        map.insert(t, l.to_string());
                    }
                    None => {
                        map.remove(&t);
                    }
                }
            }
        }
        let mut out: Vec<(usize, String, String)> = map
            .into_iter()
            .filter_map(|(t, l)| {
                self.entries
                    .iter()
                    .rposition(|e| e["id"] == t)
                    .map(|i| (i, t, l))
            })
            .collect();
        out.sort();
        out.into_iter().map(|(_, t, l)| (t, l)).collect()
    }

    fn children(&self, id: &str) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| e["parentId"] == id && e["id"] != id)
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect()
    }
}

fn pick(ids: &[String], k: usize) -> Option<String> {
    (!ids.is_empty()).then(|| ids[k % ids.len()].clone())
}

fn apply(s: &mut Session, m: &mut Model, op: &Op) {
    let ids: Vec<String> = m
        .entries
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    let result = match op {
        Op::User(t) => s.append_message(json!({"role":"user","content":t,"timestamp":1})).map(Some),
        Op::Assistant(p) => s
            .append_message(json!({"role":"assistant","provider":format!("p{p}"),"model":"m","content":[{"type":"text","text":"a"}],"timestamp":2}))
            .map(Some),
        Op::Thinking(l) => s.append_thinking_level_change(["low", "medium", "high"][*l as usize]).map(Some),
        Op::Model(x, r) => s
            .append_model_change(&format!("prov/m{x}"), r.map(|r| ["default", "smol"][r as usize]))
            .map(Some),
        Op::Ttsr(rules) => {
            let names: Vec<String> = rules.iter().map(|r| format!("rule{r}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            s.append_ttsr_injection(&refs).map(Some)
        }
        Op::Mode(x, d) => s
            .append_mode_change(["plan", "act"][*x as usize], d.then(|| json!({"f":x})))
            .map(Some),
        Op::CustomMessage(t) => s.append_custom_message("ext", json!(t), true, None).map(Some),
        Op::Custom => s.append_custom("ext", Some(json!({"state":1}))).map(Some),
        Op::SessionInit => s.append_session_init("sys", "task", &["read"], None).map(Some),
        Op::Branch(k) => {
            if let Some(id) = pick(&ids, *k) {
                s.branch(&id).unwrap();
                m.leaf = Some(id);
            }
            Ok(None)
        }
        Op::Reset => {
            s.reset_leaf();
            m.leaf = None;
            Ok(None)
        }
        Op::Summary(t, empty) => {
            let target = t.and_then(|k| pick(&ids, k));
            let summary = if *empty { "" } else { "summary" };
            s.branch_with_summary(target.as_deref(), summary, None, None).map(Some)
        }
        Op::Label(k, l) => match pick(&ids, *k) {
            Some(id) => s
                .append_label_change(&id, l.map(|l| ["a", "b", ""][l as usize]))
                .map(Some),
            None => Ok(None),
        },
        Op::Compaction(k) => match pick(&ids, *k) {
            Some(id) => s.append_compaction("sum", None, &id, 7, None, None, None).map(Some),
            None => Ok(None),
        },
    };
    if let Some(id) = result.expect("append succeeds") {
        let stored: Value = serde_json::from_str(&s.entry_json(&id).unwrap()).unwrap();
        m.entries.push(stored);
        m.leaf = Some(id);
    }
}

fn check(s: &Session, m: &Model) {
    assert_eq!(s.leaf_id().map(str::to_string), m.leaf);
    let got: Value = serde_json::from_str(s.context().unwrap().as_json()).unwrap();
    assert_eq!(got, m.context(m.leaf.as_deref()), "context at the leaf");
    for e in &m.entries {
        let id = e["id"].as_str().unwrap();
        let got: Value =
            serde_json::from_str(s.context_at(LeafSel::Id(id)).unwrap().as_json()).unwrap();
        assert_eq!(got, m.context(Some(id)), "context at {id}");
        let kids: Vec<String> = s
            .children(Some(id))
            .unwrap()
            .iter()
            .map(|c| c.id().to_string())
            .collect();
        assert_eq!(kids, m.children(id), "children of {id}");
    }
    let labels: Vec<(String, String)> = s
        .labels()
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(labels, m.labels());
    let roots: Vec<String> = s
        .children(None)
        .unwrap()
        .iter()
        .map(|c| c.id().to_string())
        .collect();
    let model_roots: Vec<String> = m
        .entries
        .iter()
        .filter(|e| e["parentId"].is_null())
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(roots, model_roots);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_model_in_memory(ops in proptest::collection::vec(op(), 1..40)) {
        let mut s = Session::in_memory("/w");
        let mut m = Model::default();
        for op in &ops {
            apply(&mut s, &mut m, op);
        }
        check(&s, &m);
    }

    #[test]
    fn engine_matches_model_persisted_and_reloaded(ops in proptest::collection::vec(op(), 1..40)) {
        let storage = MemoryStorage::new();
        let shared: Arc<dyn Storage> = Arc::new(storage.clone());
        let agent = AgentDir::new("/agent");
        let mut s = Session::create(shared.clone(), &agent, "/w").unwrap();
        let mut m = Model::default();
        for op in &ops {
            apply(&mut s, &mut m, op);
        }
        check(&s, &m);
        if s.is_on_disk() {
            let path = s.path().unwrap().to_path_buf();
            let mut again = Session::open_in(shared, &agent, &path).unwrap();
            prop_assert_eq!(again.entries().len(), m.entries.len());
            // a fresh load's leaf is the last entry
            m.leaf = m.entries.last().map(|e| e["id"].as_str().unwrap().to_string());
            check(&again, &m);
            again.reset_leaf();
        }
    }
}

//! Index lag: a global secondary index shows each item as it was `lag` ago.
//!
//! Every write that goes through the proxy is recorded per item: the image before the
//! first recent write (`base`) and the images after each write, with the time it was
//! answered. Once a write is older than the lag it becomes the new base; an item with no
//! write inside the lag is forgotten (DynamoDB's answer is then right as it is).
//!
//! A Query on a GSI is forwarded as is, then, for the items written within the lag (the
//! "window"), DynamoDB's entries are replaced by the lagged images: an entry added within
//! the lag disappears, one removed within the lag reappears, one moved within the lag
//! sits at its old place. Only the lagged images inside the page's key range (after
//! `ExclusiveStartKey`, up to DynamoDB's `LastEvaluatedKey`) are added, so pagination
//! still sees each entry once. The key condition is evaluated here for the subset the
//! project uses (`pk = :v`, optionally `AND` one of `sk <op> :v`, `sk BETWEEN :a AND :b`,
//! `begins_with(sk, :p)`); a query outside it (or with a `FilterExpression`) is answered
//! without lag and counted as unsupported.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

/// A DynamoDB item in the JSON wire format.
pub type Item = Map<String, Value>;

/// A key schema: partition and optional sort attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySchema {
    /// HASH attribute.
    pub partition: String,
    /// RANGE attribute.
    pub sort: Option<String>,
}

impl KeySchema {
    /// A canonical id of `item`'s key under this schema (`None` when an attribute is
    /// missing).
    pub fn id(&self, item: &Item) -> Option<String> {
        let p = item.get(&self.partition)?;
        let s = match &self.sort {
            Some(s) => item.get(s)?.to_string(),
            None => String::new(),
        };
        Some(format!("{p}\u{1}{s}"))
    }

    /// The key attributes of `item`.
    pub fn key_of(&self, item: &Item) -> Item {
        let mut key = Map::new();
        for name in std::iter::once(&self.partition).chain(self.sort.as_ref()) {
            if let Some(v) = item.get(name) {
                key.insert(name.clone(), v.clone());
            }
        }
        key
    }
}

/// What a GSI carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Projection {
    /// Every attribute.
    All,
    /// Keys only.
    KeysOnly,
    /// Keys and these.
    Include(Vec<String>),
}

/// A global secondary index.
#[derive(Debug, Clone)]
pub struct IndexInfo {
    /// Its key.
    pub keys: KeySchema,
    /// Its projection.
    pub projection: Projection,
}

/// A table's keys and GSIs, from DescribeTable.
#[derive(Debug, Clone)]
pub struct TableInfo {
    /// Primary key.
    pub keys: KeySchema,
    /// GSIs by name.
    pub indexes: HashMap<String, IndexInfo>,
}

impl TableInfo {
    /// From a DescribeTable answer.
    pub fn from_describe(v: &Value) -> Option<Self> {
        let t = v.get("Table")?;
        let schema = |ks: &Value| -> Option<KeySchema> {
            let mut partition = None;
            let mut sort = None;
            for e in ks.as_array()? {
                let name = e.get("AttributeName")?.as_str()?.to_owned();
                match e.get("KeyType")?.as_str()? {
                    "HASH" => partition = Some(name),
                    _ => sort = Some(name),
                }
            }
            Some(KeySchema {
                partition: partition?,
                sort,
            })
        };
        let keys = schema(t.get("KeySchema")?)?;
        let mut indexes = HashMap::new();
        for ix in t
            .get("GlobalSecondaryIndexes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(name) = ix.get("IndexName").and_then(Value::as_str) else {
                continue;
            };
            let Some(keys) = ix.get("KeySchema").and_then(schema) else {
                continue;
            };
            let p = ix.get("Projection");
            let projection = match p
                .and_then(|p| p.get("ProjectionType"))
                .and_then(Value::as_str)
            {
                Some("KEYS_ONLY") => Projection::KeysOnly,
                Some("INCLUDE") => Projection::Include(
                    p.and_then(|p| p.get("NonKeyAttributes"))
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|a| a.as_str().map(str::to_owned))
                        .collect(),
                ),
                _ => Projection::All,
            };
            indexes.insert(name.to_owned(), IndexInfo { keys, projection });
        }
        Some(Self { keys, indexes })
    }
}

/// The recent history of one item.
#[derive(Debug, Clone)]
struct History {
    /// The item's key.
    key: Item,
    /// Its image before the writes still inside the lag (`None`: absent).
    base: Option<Item>,
    /// (answered at, image after) of each write inside the lag.
    writes: Vec<(Instant, Option<Item>)>,
    /// Writes under way.
    pending: usize,
}

impl History {
    fn latest(&self) -> Option<&Item> {
        match self.writes.last() {
            Some((_, image)) => image.as_ref(),
            None => self.base.as_ref(),
        }
    }
}

/// Recent writes, per table and item.
#[derive(Debug, Default)]
pub struct Lag {
    tables: HashMap<String, HashMap<String, History>>,
}

impl Lag {
    /// Whether an item's image before a write is already known (no read needed).
    pub fn known(&self, table: &str, id: &str) -> Option<Option<Item>> {
        self.tables.get(table)?.get(id).map(|h| h.latest().cloned())
    }

    /// A write to `id` starts; `prior` is its image now (used when not already known).
    pub fn begin(&mut self, table: &str, id: &str, key: &Item, prior: Option<Item>) {
        let h = self
            .tables
            .entry(table.to_owned())
            .or_default()
            .entry(id.to_owned())
            .or_insert_with(|| History {
                key: key.clone(),
                base: prior,
                writes: Vec::new(),
                pending: 0,
            });
        h.pending += 1;
    }

    /// A write to `id` was answered; `after` is the item's image now.
    pub fn end(&mut self, table: &str, id: &str, after: Option<Option<Item>>, now: Instant) {
        let Some(h) = self.tables.get_mut(table).and_then(|t| t.get_mut(id)) else {
            return;
        };
        h.pending = h.pending.saturating_sub(1);
        if let Some(after) = after {
            if h.latest() != after.as_ref() {
                h.writes.push((now, after));
            }
        }
    }

    /// Forgets what is older than `lag`.
    pub fn prune(&mut self, now: Instant, lag: Duration) {
        let Some(horizon) = now.checked_sub(lag) else {
            return;
        };
        for items in self.tables.values_mut() {
            items.retain(|_, h| {
                let old = h.writes.iter().take_while(|(t, _)| *t <= horizon).count();
                if old > 0 {
                    h.base = h.writes.get(old - 1).and_then(|(_, i)| i.clone());
                    h.writes.drain(..old);
                }
                !h.writes.is_empty() || h.pending > 0
            });
        }
        self.tables.retain(|_, items| !items.is_empty());
    }

    /// The items of `table` written within the lag: (key, image as of `lag` ago). Call
    /// [`Lag::prune`] first.
    pub fn window(&self, table: &str) -> Vec<(Item, Option<Item>)> {
        self.tables
            .get(table)
            .into_iter()
            .flat_map(|t| t.values())
            .map(|h| (h.key.clone(), h.base.clone()))
            .collect()
    }

    /// Forgets a table.
    pub fn forget(&mut self, table: &str) {
        self.tables.remove(table);
    }
}

/// A condition on a sort key.
#[derive(Debug, Clone, PartialEq)]
pub enum SortCond {
    /// `=`, `<`, `<=`, `>`, `>=`.
    Cmp(String, Value),
    /// `BETWEEN a AND b`.
    Between(Value, Value),
    /// `begins_with(sk, p)`.
    BeginsWith(Value),
}

/// A parsed key condition.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyCond {
    /// Partition attribute and value.
    pub partition: (String, Value),
    /// Sort attribute and condition.
    pub sort: Option<(String, SortCond)>,
}

fn tokens(expr: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut chars = expr.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c.is_alphanumeric() || c == '#' || c == ':' || c == '_' {
            let mut t = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_alphanumeric() || c == '#' || c == ':' || c == '_' || c == '.' || c == '-' {
                    t.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(t);
        } else if c == '<' || c == '>' || c == '=' {
            chars.next();
            let mut t = c.to_string();
            if let Some(&'=') = chars.peek() {
                t.push('=');
                chars.next();
            } else if c == '<' && chars.peek() == Some(&'>') {
                return None;
            }
            out.push(t);
        } else if c == '(' || c == ')' || c == ',' {
            chars.next();
            out.push(c.to_string());
        } else {
            return None;
        }
    }
    Some(out)
}

/// Parses a KeyConditionExpression of the supported subset, resolving names and values.
pub fn parse_key_condition(
    expr: &str,
    names: Option<&Map<String, Value>>,
    values: Option<&Map<String, Value>>,
) -> Option<KeyCond> {
    let toks = tokens(expr)?;
    let name = |t: &str| -> Option<String> {
        if t.starts_with('#') {
            names?.get(t)?.as_str().map(str::to_owned)
        } else if t.starts_with(':') {
            None
        } else {
            Some(t.to_owned())
        }
    };
    let value = |t: &str| -> Option<Value> {
        if t.starts_with(':') {
            values?.get(t).cloned()
        } else {
            None
        }
    };
    // Split into the two conditions on the AND that is not part of a BETWEEN.
    let mut parts: Vec<&[String]> = Vec::new();
    let mut start = 0;
    let mut i = 0;
    let mut in_between = false;
    while i < toks.len() {
        let t = toks[i].to_ascii_uppercase();
        if t == "BETWEEN" {
            in_between = true;
        } else if t == "AND" {
            if in_between {
                in_between = false;
            } else {
                parts.push(&toks[start..i]);
                start = i + 1;
            }
        }
        i += 1;
    }
    parts.push(&toks[start..]);
    if parts.is_empty() || parts.len() > 2 {
        return None;
    }
    let strip = |p: &[String]| -> Vec<String> {
        // One level of parentheses around a whole condition.
        if p.len() > 2
            && p[0] == "("
            && p[p.len() - 1] == ")"
            && !p[1].eq_ignore_ascii_case("begins_with")
        {
            p[1..p.len() - 1].to_vec()
        } else {
            p.to_vec()
        }
    };
    let mut eqs: Vec<(String, Value)> = Vec::new();
    let mut sorts: Vec<(String, SortCond)> = Vec::new();
    for p in parts {
        let p = strip(p);
        match p.as_slice() {
            [a, op, v] if ["=", "<", "<=", ">", ">="].contains(&op.as_str()) => {
                let (a, v) = (name(a)?, value(v)?);
                if op == "=" {
                    eqs.push((a, v));
                } else {
                    sorts.push((a, SortCond::Cmp(op.clone(), v)));
                }
            }
            [a, between, x, and, y]
                if between.eq_ignore_ascii_case("BETWEEN") && and.eq_ignore_ascii_case("AND") =>
            {
                sorts.push((name(a)?, SortCond::Between(value(x)?, value(y)?)));
            }
            [f, open, a, comma, v, close]
                if f.eq_ignore_ascii_case("begins_with")
                    && open == "("
                    && comma == ","
                    && close == ")" =>
            {
                sorts.push((name(a)?, SortCond::BeginsWith(value(v)?)));
            }
            _ => return None,
        }
    }
    // Two equalities: the partition one is decided by the caller's schema.
    match (eqs.len(), sorts.len()) {
        (1, 0) => Some(KeyCond {
            partition: eqs.pop()?,
            sort: None,
        }),
        (1, 1) => Some(KeyCond {
            partition: eqs.pop()?,
            sort: sorts.pop(),
        }),
        (2, 0) => {
            let second = eqs.pop()?;
            let first = eqs.pop()?;
            Some(KeyCond {
                partition: first,
                sort: Some((second.0, SortCond::Cmp("=".to_owned(), second.1))),
            })
        }
        _ => None,
    }
}

impl KeyCond {
    /// Puts the partition condition on `schema.partition` (the expression may name the
    /// sort key's equality first). `None` when the condition does not fit the schema.
    pub fn for_schema(mut self, schema: &KeySchema) -> Option<Self> {
        if self.partition.0 != schema.partition {
            match &self.sort {
                Some((n, SortCond::Cmp(op, v))) if op == "=" && *n == schema.partition => {
                    let sort = (
                        self.partition.0.clone(),
                        SortCond::Cmp("=".to_owned(), self.partition.1.clone()),
                    );
                    self.partition = (n.clone(), v.clone());
                    self.sort = Some(sort);
                }
                _ => return None,
            }
        }
        match (&self.sort, &schema.sort) {
            (Some((n, _)), Some(s)) if n == s => Some(self),
            (None, _) => Some(self),
            _ => None,
        }
    }

    /// Whether `item` satisfies the condition.
    pub fn matches(&self, item: &Item) -> bool {
        if item.get(&self.partition.0) != Some(&self.partition.1) {
            return false;
        }
        let Some((name, cond)) = &self.sort else {
            return true;
        };
        let Some(v) = item.get(name) else {
            return false;
        };
        match cond {
            SortCond::Cmp(op, x) => match compare(v, x) {
                Some(o) => match op.as_str() {
                    "=" => o == Ordering::Equal,
                    "<" => o == Ordering::Less,
                    "<=" => o != Ordering::Greater,
                    ">" => o == Ordering::Greater,
                    ">=" => o != Ordering::Less,
                    _ => false,
                },
                None => false,
            },
            SortCond::Between(a, b) => {
                compare(v, a).is_some_and(|o| o != Ordering::Less)
                    && compare(v, b).is_some_and(|o| o != Ordering::Greater)
            }
            SortCond::BeginsWith(p) => match (v.get("S"), p.get("S")) {
                (Some(Value::String(s)), Some(Value::String(p))) => s.starts_with(p.as_str()),
                _ => match (v.get("B"), p.get("B")) {
                    (Some(Value::String(s)), Some(Value::String(p))) => s.starts_with(p.as_str()),
                    _ => false,
                },
            },
        }
    }
}

/// Orders two attribute values of the same key type (S by bytes, N numerically, B by
/// encoded text).
pub fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    if let (Some(Value::String(x)), Some(Value::String(y))) = (a.get("S"), b.get("S")) {
        return Some(x.as_bytes().cmp(y.as_bytes()));
    }
    if let (Some(Value::String(x)), Some(Value::String(y))) = (a.get("N"), b.get("N")) {
        return x.parse::<f64>().ok()?.partial_cmp(&y.parse::<f64>().ok()?);
    }
    if let (Some(Value::String(x)), Some(Value::String(y))) = (a.get("B"), b.get("B")) {
        return Some(x.cmp(y));
    }
    None
}

/// The position of an index entry: index sort key, then the table key.
fn position(item: &Item, index: &KeySchema, table: &KeySchema) -> Vec<Value> {
    [
        index.sort.as_ref(),
        Some(&table.partition),
        table.sort.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|n| item.get(n).cloned().unwrap_or(Value::Null))
    .collect()
}

fn cmp_position(a: &[Value], b: &[Value]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        match compare(x, y) {
            Some(Ordering::Equal) | None => {}
            Some(o) => return o,
        }
    }
    Ordering::Equal
}

/// What a lagged query did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Applied {
    /// Entries DynamoDB returned that the lag hid.
    pub hidden: usize,
    /// Lagged entries the lag showed.
    pub shown: usize,
}

/// The query a lagged answer is computed for.
pub struct LaggedQuery<'a> {
    /// The table.
    pub table: &'a TableInfo,
    /// The GSI queried.
    pub index: &'a IndexInfo,
    /// Its key condition, fitted to the index.
    pub cond: KeyCond,
    /// `ExclusiveStartKey`, if any.
    pub start: Option<&'a Item>,
    /// `ScanIndexForward`.
    pub forward: bool,
    /// `Limit`, if any.
    pub limit: Option<usize>,
    /// Top-level attributes of a `ProjectionExpression`, if any.
    pub attributes: Option<Vec<String>>,
}

impl LaggedQuery<'_> {
    /// Rewrites `items` (DynamoDB's page, ending at `last_key`) as of the lag, given the
    /// `window` of recently written items. Returns the new page and its last key.
    pub fn apply(
        &self,
        items: Vec<Item>,
        last_key: Option<Item>,
        window: &[(Item, Option<Item>)],
    ) -> (Vec<Item>, Option<Item>, Applied) {
        let tk = &self.table.keys;
        let ik = &self.index.keys;
        let ids: std::collections::HashSet<String> =
            window.iter().filter_map(|(k, _)| tk.id(k)).collect();
        let mut applied = Applied::default();
        let mut page: Vec<Item> = items
            .into_iter()
            .filter(|i| {
                let hide = tk.id(i).is_some_and(|id| ids.contains(&id));
                applied.hidden += usize::from(hide);
                !hide
            })
            .collect();
        let lower = self.start.map(|s| position(s, ik, tk));
        let upper = last_key.as_ref().map(|s| position(s, ik, tk));
        for (_, image) in window {
            let Some(image) = image else { continue };
            // Sparse index: an item without both index keys is not in it.
            if image.get(&ik.partition).is_none()
                || ik.sort.as_ref().is_some_and(|s| image.get(s).is_none())
                || !self.cond.matches(image)
            {
                continue;
            }
            let p = position(image, ik, tk);
            let after_start = lower.as_ref().is_none_or(|l| {
                let o = cmp_position(&p, l);
                if self.forward {
                    o == Ordering::Greater
                } else {
                    o == Ordering::Less
                }
            });
            let before_end = upper.as_ref().is_none_or(|u| {
                let o = cmp_position(&p, u);
                if self.forward {
                    o != Ordering::Greater
                } else {
                    o != Ordering::Less
                }
            });
            if after_start && before_end {
                page.push(self.project(image));
                applied.shown += 1;
            }
        }
        page.sort_by(|a, b| {
            let o = cmp_position(&position(a, ik, tk), &position(b, ik, tk));
            if self.forward {
                o
            } else {
                o.reverse()
            }
        });
        let cut = self.limit.is_some_and(|limit| page.len() > limit);
        if let Some(limit) = self.limit {
            page.truncate(limit);
        }
        // A page goes on from its last entry, as DynamoDB's does from the last one it
        // returns: entries the lag hid behind it must not fall behind the next page's start
        // (they appear while the caller reads on, and DynamoDB would list them then).
        let last = match (last_key, page.last()) {
            (Some(_), Some(entry)) => Some(self.key_of(entry)),
            (None, Some(entry)) if cut => Some(self.key_of(entry)),
            (last, _) => last,
        };
        if let Some(attrs) = &self.attributes {
            for i in &mut page {
                i.retain(|k, _| attrs.contains(k));
            }
        }
        (page, last, applied)
    }

    /// The index entry of a table item (its keys and the projected attributes).
    fn project(&self, image: &Item) -> Item {
        let keep = |k: &str| {
            k == self.table.keys.partition
                || self.table.keys.sort.as_deref() == Some(k)
                || k == self.index.keys.partition
                || self.index.keys.sort.as_deref() == Some(k)
                || match &self.index.projection {
                    Projection::All => true,
                    Projection::KeysOnly => false,
                    Projection::Include(a) => a.iter().any(|x| x == k),
                }
        };
        image
            .iter()
            .filter(|(k, _)| keep(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// A LastEvaluatedKey for an index entry: table and index keys.
    fn key_of(&self, entry: &Item) -> Item {
        let mut key = self.table.keys.key_of(entry);
        key.extend(self.index.keys.key_of(entry));
        key
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Item {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn parses_the_project_key_conditions() {
        let values = map(
            json!({":pk": {"S": "P"}, ":upper": {"S": "5"}, ":from": {"S": "1"}, ":to": {"S": "3"}, ":prefix": {"S": "q#"}}),
        );
        let names = map(json!({"#p": "gsi2pk"}));
        let c = parse_key_condition("gsi1pk = :pk", None, Some(&values)).unwrap();
        assert_eq!(c.partition.0, "gsi1pk");
        assert!(c.sort.is_none());
        let c =
            parse_key_condition("gsi2pk = :pk AND gsi2sk <= :upper", None, Some(&values)).unwrap();
        assert_eq!(
            c.sort,
            Some((
                "gsi2sk".into(),
                SortCond::Cmp("<=".into(), json!({"S": "5"}))
            ))
        );
        let c = parse_key_condition(
            "#p = :pk AND gsi2sk BETWEEN :from AND :to",
            Some(&names),
            Some(&values),
        )
        .unwrap();
        assert_eq!(c.partition.0, "gsi2pk");
        assert_eq!(
            c.sort,
            Some((
                "gsi2sk".into(),
                SortCond::Between(json!({"S": "1"}), json!({"S": "3"}))
            ))
        );
        let c = parse_key_condition(
            "gsi3pk = :pk AND begins_with(gsi3sk, :prefix)",
            None,
            Some(&values),
        )
        .unwrap();
        assert_eq!(
            c.sort,
            Some(("gsi3sk".into(), SortCond::BeginsWith(json!({"S": "q#"}))))
        );
        assert!(c.matches(&map(json!({"gsi3pk": {"S": "P"}, "gsi3sk": {"S": "q#1"}}))));
        assert!(!c.matches(&map(json!({"gsi3pk": {"S": "P"}, "gsi3sk": {"S": "r#1"}}))));
        assert!(parse_key_condition("a = :pk OR b = :pk", None, Some(&values)).is_none());
        assert!(parse_key_condition("size(a) > :pk", None, Some(&values)).is_none());
    }

    fn info() -> TableInfo {
        TableInfo {
            keys: KeySchema {
                partition: "pk".into(),
                sort: Some("sk".into()),
            },
            indexes: HashMap::from([(
                "ready".to_owned(),
                IndexInfo {
                    keys: KeySchema {
                        partition: "gsi1pk".into(),
                        sort: Some("gsi1sk".into()),
                    },
                    projection: Projection::Include(vec!["lease".into()]),
                },
            )]),
        }
    }

    fn entry(id: &str, sk: &str) -> Item {
        map(
            json!({"pk": {"S": id}, "sk": {"S": "JOB"}, "gsi1pk": {"S": "R"}, "gsi1sk": {"S": sk}, "lease": {"N": "1"}, "big": {"S": "x"}}),
        )
    }

    #[test]
    fn a_new_entry_is_hidden_and_a_removed_one_shown_during_the_lag() {
        let t = info();
        let ix = &t.indexes["ready"];
        let values = map(json!({":pk": {"S": "R"}}));
        let q = LaggedQuery {
            table: &t,
            index: ix,
            cond: parse_key_condition("gsi1pk = :pk", None, Some(&values))
                .unwrap()
                .for_schema(&ix.keys)
                .unwrap(),
            start: None,
            forward: true,
            limit: None,
            attributes: None,
        };
        let a = entry("a", "1");
        let b = entry("b", "2");
        let c = entry("c", "3");
        let mut lag = Lag::default();
        let t0 = Instant::now();
        // b was just added (absent before), c just removed (claimed), a untouched.
        for (item, before, after) in [(&b, None, Some(b.clone())), (&c, Some(c.clone()), None)] {
            let id = info().keys.id(item).unwrap();
            lag.begin("t", &id, &info().keys.key_of(item), before);
            lag.end("t", &id, Some(after), t0);
        }
        lag.prune(t0, Duration::from_millis(50));
        let window = lag.window("t");
        let (page, last, applied) = q.apply(vec![a.clone(), b.clone()], None, &window);
        let ids: Vec<&str> = page
            .iter()
            .map(|i| i["pk"]["S"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["a", "c"]);
        assert!(last.is_none());
        assert_eq!((applied.hidden, applied.shown), (1, 1));
        assert!(page[1].get("big").is_none(), "projected to the index");
        // After the lag, DynamoDB's answer stands.
        lag.prune(t0 + Duration::from_millis(60), Duration::from_millis(50));
        assert!(lag.window("t").is_empty());
    }

    #[test]
    fn lagged_entries_stay_inside_the_page_range_and_limit() {
        let t = info();
        let ix = &t.indexes["ready"];
        let values = map(json!({":pk": {"S": "R"}}));
        let a = entry("a", "1");
        let b = entry("b", "2");
        let c = entry("c", "3");
        let d = entry("d", "4");
        // c was removed within the lag; DynamoDB answered [a, b] with LastEvaluatedKey b.
        let window = vec![(info().keys.key_of(&c), Some(c.clone()))];
        let q = LaggedQuery {
            table: &t,
            index: ix,
            cond: parse_key_condition("gsi1pk = :pk", None, Some(&values)).unwrap(),
            start: None,
            forward: true,
            limit: Some(2),
            attributes: None,
        };
        let (page, last, _) = q.apply(vec![a.clone(), b.clone()], Some(b.clone()), &window);
        assert_eq!(page.len(), 2);
        assert_eq!(last.unwrap()["pk"]["S"], "b");
        // The next page (after b) gets c, then d.
        let q2 = LaggedQuery {
            start: Some(&b),
            ..q
        };
        let (page, last, _) = q2.apply(vec![d.clone()], None, &window);
        let ids: Vec<&str> = page
            .iter()
            .map(|i| i["pk"]["S"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["c", "d"]);
        assert!(last.is_none());
    }

    #[test]
    fn a_page_goes_on_from_its_last_shown_entry_not_from_a_hidden_one() {
        let t = info();
        let ix = &t.indexes["ready"];
        let values = map(json!({":pk": {"S": "R"}}));
        let a = entry("a", "1");
        let b = entry("b", "2");
        let c = entry("c", "3");
        // b and c were written within the lag (new entries); DynamoDB answered [a, b, c]
        // with LastEvaluatedKey c (its Limit).
        let window = vec![
            (info().keys.key_of(&b), None),
            (info().keys.key_of(&c), None),
        ];
        let q = LaggedQuery {
            table: &t,
            index: ix,
            cond: parse_key_condition("gsi1pk = :pk", None, Some(&values)).unwrap(),
            start: None,
            forward: true,
            limit: Some(3),
            attributes: None,
        };
        let (page, last, applied) = q.apply(
            vec![a.clone(), b.clone(), c.clone()],
            Some(c.clone()),
            &window,
        );
        assert_eq!(applied.hidden, 2);
        assert_eq!(page.len(), 1);
        // Next page after a: b and c are listed there once the lag is over.
        assert_eq!(last.unwrap()["pk"]["S"], "a");
        // A page the lag empties keeps DynamoDB's last key (the proxy reads on from it).
        let (page, last, _) = q.apply(vec![b.clone(), c.clone()], Some(c.clone()), &window);
        assert!(page.is_empty());
        assert_eq!(last.unwrap()["pk"]["S"], "c");
        // The last page stays the last.
        let (page, last, _) = q.apply(vec![a.clone(), b], None, &window);
        assert_eq!(page.len(), 1);
        assert!(last.is_none());
    }
}

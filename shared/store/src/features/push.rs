//! Push endpoint registrations (ojs-serverless.md §2.1) and the claim of one job for a
//! delivery.
//!
//! A registration is one item in the `PUSH` partition (sort key `E#<id>`, listed by the
//! API) plus one copy per queue it serves in `PUSHQ#<queue>` (same sort key), written
//! and deleted together in one transaction. The dispatcher reads the endpoints of a
//! job's queue with one Query of that small partition (at most a handful of items), never
//! a Scan and never the whole registry.
//!
//! The signing secret is stored in the items (DynamoDB encrypts them at rest) and never
//! leaves the store through [`PushEntry::view`].

use aws_sdk_dynamodb::types::{Delete, TransactWriteItem, Update};
use ojs_core::push::PushEndpoint;
use ojs_core::rate_limit::{OnLimit, RateLimitPolicy};
use ojs_core::time::{self, Timestamp};
use ojs_core::{Job, JobId, JobState, QueueName};
use serde_json::{json, Value};

use crate::engine::Engine;
use crate::error::StoreError;
use crate::features::follow_ups::following_up;
use crate::item::{self, s, Item};

/// Partition of every registration (the API's listing).
const PUSH_PK: &str = "PUSH";
/// Most registrations the store takes: the listing is one Query of one partition.
pub const MAX_PUSH_ENDPOINTS: usize = 100;
/// The item counting the registrations (outside the listing's partition). Every write of
/// the registry sets it to the count its listing found, plus or minus one, conditioned on
/// it still holding that count: two registrations racing for the last place cannot both
/// pass [`MAX_PUSH_ENDPOINTS`]; the loser is told to retry.
const COUNT_PK: &str = "PUSH#COUNT";
/// How much longer than its delivery timeout a pushed job's lease (and its endpoint slot)
/// lasts: if the dispatcher dies mid-delivery, the lease ends and the sweep retries it.
const LEASE_MARGIN_MS: u64 = 10_000;

/// The mark a nudge sets on a waiting job's item ([`Store::nudge_waiting_pushes`]): the
/// write puts the job on the change stream again, where the dispatcher takes it as ready.
const NUDGED: &str = "nudged_us";
/// How long a job of a pushed type waits before the scheduler nudges it (longer than any
/// dispatch the stream itself started would take to claim it).
pub const PUSH_NUDGE_AFTER: chrono::TimeDelta = chrono::TimeDelta::seconds(30);
/// Most jobs of one queue a nudge marks: a delivery that ends catches up on the rest.
const NUDGE_PER_QUEUE: usize = 10;

fn queue_pk(queue: &QueueName) -> String {
    format!("PUSHQ#{queue}")
}

/// The partitions holding a registration: the listing's, and one per queue it serves
/// (written and deleted together).
fn entry_pks(queues: &[QueueName]) -> impl Iterator<Item = String> + '_ {
    std::iter::once(PUSH_PK.to_owned()).chain(queues.iter().map(queue_pk))
}

fn entry_sk(id: &str) -> String {
    format!("E#{id}")
}

/// A stored registration.
#[derive(Debug, Clone, PartialEq)]
pub struct PushEntry {
    /// Its id (`pe_<uuid>`).
    pub id: String,
    /// The registration, with its secret.
    pub endpoint: PushEndpoint,
    /// When it was registered.
    pub created_at: String,
    /// The id of the API key that registered it (None: keys were off, or before keys
    /// were recorded).
    pub created_by: Option<String>,
    /// Why and when deliveries to it stopped (ojs-serverless.md §7.2: the endpoint
    /// answered 404, 401 or 403, which retrying cannot fix): `(at, reason)`.
    pub disabled: Option<(String, String)>,
}

impl PushEntry {
    /// The API's view: never the secret.
    pub fn view(&self) -> Value {
        let mut view = self.endpoint.view(&self.id, &self.created_at);
        if let Some(o) = view.as_object_mut() {
            o.insert("created_by".into(), json!(self.created_by));
            match &self.disabled {
                None => {
                    o.insert("status".into(), json!("active"));
                }
                Some((at, reason)) => {
                    o.insert("status".into(), json!("disabled"));
                    o.insert("disabled_at".into(), json!(at));
                    o.insert("disabled_reason".into(), json!(reason));
                }
            }
        }
        view
    }

    /// The worker id its deliveries claim jobs under (the holder the ACK and FAIL of a
    /// delivery are fenced by).
    pub fn worker_id(&self) -> String {
        format!("push_{}", self.id)
    }

    /// The concurrency key of its in-flight deliveries.
    fn slot_policy(&self) -> RateLimitPolicy {
        RateLimitPolicy {
            key: format!("push:{}", self.id),
            concurrency: Some(self.endpoint.max_concurrency),
            rate: None,
            throttle: None,
            on_limit: OnLimit::Wait,
        }
    }

    fn to_item(&self, pk: String) -> Item {
        let e = &self.endpoint;
        let doc = json!({
            "endpoint": e.target.as_str(),
            "job_types": e.job_types.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
            "queues": e.queues.iter().map(QueueName::as_str).collect::<Vec<_>>(),
            "config": {
                "max_concurrency": e.max_concurrency,
                "timeout_ms": e.timeout_ms,
                "signing_secret": e.signing_secret,
            },
        });
        let mut item = Item::from([
            ("pk".to_owned(), s(pk)),
            ("sk".to_owned(), s(entry_sk(&self.id))),
            ("id".to_owned(), s(self.id.clone())),
            ("doc".to_owned(), s(doc.to_string())),
            ("created_at".to_owned(), s(self.created_at.clone())),
        ]);
        if let Some(by) = &self.created_by {
            item.insert("created_by".to_owned(), s(by.clone()));
        }
        item
    }

    fn from_item(item: &Item) -> Result<Self, StoreError> {
        let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok());
        let doc: Value = get("doc")
            .and_then(|raw| serde_json::from_str(raw).ok())
            .ok_or_else(|| StoreError::Corrupt("push endpoint item without doc".into()))?;
        // Read back as registered: an address allowed then is not re-judged here (every
        // delivery checks the resolved address itself).
        let endpoint = PushEndpoint::from_json(&doc, true)
            .map_err(|e| StoreError::Corrupt(format!("push endpoint: {}", e.message)))?;
        Ok(Self {
            id: get("id").cloned().unwrap_or_default(),
            endpoint,
            created_at: get("created_at").cloned().unwrap_or_default(),
            created_by: get("created_by").cloned(),
            disabled: get("disabled_at").map(|at| {
                (
                    at.clone(),
                    get("disabled_reason").cloned().unwrap_or_default(),
                )
            }),
        })
    }
}

/// What [`Store::claim_for_push`] came to.
#[derive(Debug, Clone)]
pub enum PushClaim {
    /// The job, active under the endpoint's worker id, with one of its slots.
    Claimed { job: Box<Job>, slot: SlotHold },
    /// Every slot of the endpoint is held: another endpoint may take the job.
    Full,
    /// The job is not to be delivered now (no longer available, its queue paused, a rate
    /// limit refusing it): no other endpoint needs to try.
    NotNow,
}

/// One in-flight slot of an endpoint, held for one delivery: give it back with
/// [`Store::release_push_slot`]. Each take has its own holder entry, so a second dispatch
/// of the same job (the stream's and a catch-up's), whose claim loses, gives back only the
/// slot it took itself.
#[derive(Debug, Clone)]
pub struct SlotHold(String);

/// A job the change stream saw become available, as much as its claim needs.
#[derive(Debug, Clone)]
pub struct ReadyJob {
    /// The job as written.
    pub job: Job,
    ready_sk: String,
}

impl crate::stream::Change {
    /// The job this change made available (created available, promoted, retried,
    /// released), if any: a new image in `available` with a ready-index entry that the old
    /// image did not have, or one a nudge marked ([`Store::nudge_waiting_pushes`]).
    pub fn ready_job(&self) -> Option<ReadyJob> {
        let new = self.new.as_ref()?;
        if item::state_of(new) != Some(JobState::Available) {
            return None;
        }
        let ready_sk = new.get("gsi1sk")?.as_s().ok()?.clone();
        let old = self.old.as_ref();
        let was_ready = old
            .and_then(|o| o.get("gsi1sk"))
            .and_then(|v| v.as_s().ok())
            == Some(&ready_sk);
        let nudged =
            new.get(NUDGED).is_some() && new.get(NUDGED) != old.and_then(|o| o.get(NUDGED));
        if was_ready && !nudged {
            return None;
        }
        let job = item::job_from_item(new).ok()?;
        Some(ReadyJob { job, ready_sk })
    }
}

/// The queues `endpoints` deliver from (the enabled ones), each once.
pub fn served_queues(endpoints: &[PushEntry]) -> Vec<&QueueName> {
    let mut queues: Vec<&QueueName> = endpoints
        .iter()
        .filter(|e| e.disabled.is_none())
        .flat_map(|e| &e.endpoint.queues)
        .collect();
    queues.sort();
    queues.dedup();
    queues
}

/// Push endpoints: their registry, claims of jobs for delivery and the nudges of waiting jobs.
pub struct PushEndpoints<'a> {
    engine: &'a Engine,
}

impl<'a> PushEndpoints<'a> {
    /// The service over `engine`.
    pub(crate) fn new(engine: &'a Engine) -> Self {
        Self { engine }
    }
}

impl PushEndpoints<'_> {
    /// Stores a new registration under a fresh id: its listing item, one item per queue
    /// and the registry's count, in one transaction (2 + queues writes, after one Query of
    /// the listing). [`StoreError::LimitReached`] past [`MAX_PUSH_ENDPOINTS`];
    /// [`StoreError::Concurrent`] when another registration or deletion went first.
    pub async fn put_push_endpoint(
        &self,
        endpoint: &PushEndpoint,
        created_by: Option<&str>,
        now: Timestamp,
    ) -> Result<PushEntry, StoreError> {
        let listed = self.list_push_endpoints().await?.len();
        if listed >= MAX_PUSH_ENDPOINTS {
            return Err(StoreError::LimitReached(format!(
                "at most {MAX_PUSH_ENDPOINTS} push endpoints may be registered; delete one first"
            )));
        }
        let entry = PushEntry {
            id: format!("pe_{}", uuid::Uuid::now_v7()),
            endpoint: endpoint.clone(),
            created_at: time::format(&now),
            created_by: created_by.map(str::to_owned),
            disabled: None,
        };
        let mut items = Vec::new();
        for pk in entry_pks(&endpoint.queues) {
            items.push(self.engine.table.put_new(entry.to_item(pk))?);
        }
        items.push(self.count_update(listed, listed + 1)?);
        self.write_registry(items).await?;
        Ok(entry)
    }

    /// The registry count's move from `listed` (what the listing just found) to `to`.
    fn count_update(&self, listed: usize, to: usize) -> Result<TransactWriteItem, StoreError> {
        let update = Update::builder()
            .table_name(self.engine.table())
            .key("pk", s(COUNT_PK))
            .key("sk", s(COUNT_PK))
            .update_expression("SET n = :to")
            // A registry older than its count item counts from its listing.
            .condition_expression("attribute_not_exists(n) OR n = :listed")
            .expression_attribute_values(":to", item::n(to as i64))
            .expression_attribute_values(":listed", item::n(listed as i64))
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// Writes a registry transaction; a refused condition means another write of the
    /// registry went first.
    async fn write_registry(&self, items: Vec<TransactWriteItem>) -> Result<(), StoreError> {
        match self.engine.table.transact(items).await {
            Err(e) if crate::error::cancellation_codes(&e).is_some() => {
                Err(StoreError::Concurrent("the push endpoint registry".into()))
            }
            out => out.map(|_| ()).map_err(StoreError::from_sdk),
        }
    }

    /// The registration `id`, if any (one strongly consistent GetItem).
    pub async fn get_push_endpoint(&self, id: &str) -> Result<Option<PushEntry>, StoreError> {
        let key = Item::from([
            ("pk".to_owned(), s(PUSH_PK)),
            ("sk".to_owned(), s(entry_sk(id))),
        ]);
        self.engine
            .table
            .read_item(key)
            .await?
            .as_ref()
            .map(PushEntry::from_item)
            .transpose()
    }

    /// Every registration, oldest first (one strongly consistent Query; bounded by
    /// [`MAX_PUSH_ENDPOINTS`]).
    pub async fn list_push_endpoints(&self) -> Result<Vec<PushEntry>, StoreError> {
        self.engine
            .table
            .query_partition(PUSH_PK, true)
            .await?
            .iter()
            .map(PushEntry::from_item)
            .collect()
    }

    /// The registrations serving `queue` (one Query of `PUSHQ#<queue>`: the dispatch
    /// path's lookup). Unreadable items are skipped with a warning.
    pub async fn push_endpoints_of(&self, queue: &QueueName) -> Result<Vec<PushEntry>, StoreError> {
        let items = self
            .engine
            .table
            .query_partition(&queue_pk(queue), false)
            .await?;
        Ok(crate::item::readable_items(
            &items,
            PushEntry::from_item,
            "push endpoint",
        ))
    }

    /// Stops deliveries to `entry` (§7.2.2-3: it answered 404, 401 or 403): its listing
    /// and queue items record when and why, in one transaction (1 + queues writes). Its
    /// queues' jobs stay available to polling workers; registering it again resumes.
    pub async fn disable_push_endpoint(
        &self,
        entry: &PushEntry,
        reason: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let mut items = Vec::new();
        for pk in entry_pks(&entry.endpoint.queues) {
            let update = Update::builder()
                .table_name(self.engine.table())
                .key("pk", s(pk))
                .key("sk", s(entry_sk(&entry.id)))
                .update_expression("SET disabled_at = :at, disabled_reason = :why")
                .condition_expression("attribute_exists(pk) AND attribute_not_exists(disabled_at)")
                .expression_attribute_values(":at", s(time::format(&now)))
                .expression_attribute_values(
                    ":why",
                    s(reason.chars().take(500).collect::<String>()),
                )
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            items.push(TransactWriteItem::builder().update(update).build());
        }
        match self.engine.table.transact(items).await {
            // Deleted meanwhile, or disabled by another delivery first: nothing to do.
            Err(e) if crate::error::cancellation_codes(&e).is_some() => Ok(()),
            out => out.map_err(StoreError::from_sdk),
        }
    }

    /// Removes registration `id` and its queue items in one transaction; NotFound when
    /// there is none. Deliveries in flight finish; no new one starts.
    pub async fn delete_push_endpoint(&self, id: &str) -> Result<PushEntry, StoreError> {
        let listing = self.list_push_endpoints().await?;
        let entry = listing
            .iter()
            .find(|e| e.id == id)
            .cloned()
            .ok_or(StoreError::NotFound)?;
        let mut items = Vec::new();
        for pk in entry_pks(&entry.endpoint.queues) {
            let delete = Delete::builder()
                .table_name(self.engine.table())
                .key("pk", s(pk))
                .key("sk", s(entry_sk(id)))
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            items.push(TransactWriteItem::builder().delete(delete).build());
        }
        items.push(self.count_update(listing.len(), listing.len() - 1)?);
        self.write_registry(items).await?;
        Ok(entry)
    }

    /// Claims `ready` for a delivery to `endpoint`, exactly as FETCH claims a candidate
    /// (the same conditional write on `available` and the ready-index entry, so a polling
    /// worker or another endpoint racing for it cannot both win), after taking one of the
    /// endpoint's in-flight slots (`max_concurrency`), which is given back if the claim
    /// loses. Calls: the queue's
    /// settings (cached), the slot (one GetItem, one UpdateItem), the claim (one
    /// UpdateItem; a job with a rate limit claims in a transaction as FETCH does).
    pub async fn claim_for_push(
        &self,
        ready: &ReadyJob,
        endpoint: &PushEntry,
        now: Timestamp,
    ) -> Result<PushClaim, StoreError> {
        following_up(self.engine, now, |engine| async move {
            PushEndpoints::new(&engine)
                .claim_for_push_in_scope(ready, endpoint, now)
                .await
        })
        .await
    }

    /// [`Store::claim_for_push`] within the caller's follow-up scope.
    async fn claim_for_push_in_scope(
        &self,
        ready: &ReadyJob,
        endpoint: &PushEntry,
        now: Timestamp,
    ) -> Result<PushClaim, StoreError> {
        let queue = &ready.job.spec.queue;
        let settings = self
            .engine
            .queue_settings(std::slice::from_ref(queue))
            .await?;
        let queue_settings = settings.get(queue.as_str()).cloned().unwrap_or_default();
        if queue_settings.paused {
            return Ok(PushClaim::NotNow);
        }
        let lane = crate::keys::Lane::of(&ready.job);
        let limits = self
            .engine
            .lane_limits(&lane, queue_settings.rate_limit.as_ref())
            .await?;
        let rate_limit =
            match &ready.job.spec.rate_limit {
                Some(rl) => Some(RateLimitPolicy::from_stored(rl, queue.as_str()).map_err(
                    |e| StoreError::Corrupt(format!("stored rate_limit: {}", e.message)),
                )?),
                None => None,
            };
        let lease_ms = endpoint.endpoint.timeout_ms + LEASE_MARGIN_MS;
        let holder = format!("{}.{}", ready.job.id, uuid::Uuid::new_v4().simple());
        let slot = endpoint.slot_policy();
        let lease_until_us = time::after_ms(now, lease_ms).timestamp_micros();
        if !self
            .engine
            .take_slot(&slot, &holder, lease_until_us, now.timestamp_micros())
            .await?
        {
            return Ok(PushClaim::Full);
        }
        let req = crate::claim::FetchRequest {
            queues: vec![queue.clone()],
            count: 1,
            worker_id: Some(endpoint.worker_id()),
            visibility_timeout_ms: Some(lease_ms),
            tenant: ojs_core::tenant::Scope::Any,
            scheduling: None,
        };
        let candidate = crate::engine::candidates::Candidate::for_push(
            ready.job.id,
            ready.ready_sk.clone(),
            ready.job.spec.timeout_ms,
            rate_limit,
        );
        let claimed = self
            .engine
            .claim_one(&lane, &candidate, &req, now, &limits)
            .await;
        // The endpoint is sent the whole request (its args may be in the payload bucket).
        // A damaged payload fails the job for good, as FETCH does; a failing payload
        // store leaves it leased, and the sweep reclaims it when the delivery's lease
        // ends (giving it back at once would make the change stream offer it again at
        // once, in a loop as long as S3 fails).
        let claimed = match claimed {
            Ok(Some(job)) => match self.engine.try_full_job(job).await {
                Ok(job) => Ok(Some(job)),
                Err((job, e @ StoreError::Corrupt(_))) => {
                    self.engine.settle_unread(job, e, now).await;
                    Ok(None)
                }
                Err((_, e)) => Err(e),
            },
            other => other,
        };
        match claimed {
            Ok(Some(job)) => Ok(PushClaim::Claimed {
                job: Box::new(job),
                slot: SlotHold(holder),
            }),
            other => {
                self.engine
                    .release_holder(&slot.key, &holder, Some(lease_until_us))
                    .await;
                other.map(|_| PushClaim::NotNow)
            }
        }
    }

    /// Gives back a delivery's in-flight slot at `endpoint` (one or two UpdateItems; best
    /// effort: a slot not given back ends with the delivery's lease).
    pub async fn release_push_slot(&self, endpoint: &PushEntry, slot: &SlotHold) {
        self.engine
            .release_holder(&endpoint.slot_policy().key, &slot.0, None)
            .await;
    }

    /// Puts jobs left waiting on a queue with endpoints back on the change stream, for the
    /// scheduler: on AWS nothing else looks for them (a queue resumed after a pause, slots
    /// freed by a delivery whose process died), while `make dev` catches up in process.
    /// For each queue an enabled endpoint serves (one Query of the registry), up to
    /// [`NUDGE_PER_QUEUE`] jobs of a type an endpoint takes, available since before
    /// `waited_since` ([`Store::ready_jobs`]), are each marked with one UpdateItem
    /// conditioned on still being available at the same index entry. The stream function
    /// dispatches them like new jobs, and a delivery that ends catches up on the rest of
    /// the queue. A queue that fails is logged and skipped. Returns how many were marked.
    pub async fn nudge_waiting_pushes(
        &self,
        now: Timestamp,
        waited_since: Timestamp,
    ) -> Result<usize, StoreError> {
        let endpoints = self.list_push_endpoints().await?;
        let mut nudged = 0;
        for queue in served_queues(&endpoints) {
            nudged += self.nudge_queue(queue, &endpoints, now, waited_since).await;
        }
        Ok(nudged)
    }

    /// The nudge of [`Store::nudge_waiting_pushes`] for one queue just resumed, for the
    /// jobs that became available while it was paused: on AWS no delivery ends on a paused
    /// queue, so without it they would wait for the scheduler's minute run. One Query of
    /// the queue's registrations (all a queue without endpoints costs), then as there.
    pub async fn nudge_resumed_queue(
        &self,
        queue: &QueueName,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        let endpoints = self.push_endpoints_of(queue).await?;
        if !endpoints.iter().any(|e| e.disabled.is_none()) {
            return Ok(0);
        }
        Ok(self.nudge_queue(queue, &endpoints, now, now).await)
    }

    /// Up to [`NUDGE_PER_QUEUE`] jobs of `queue` that a type of `endpoints` takes and that
    /// waited since before `waited_since`, each marked with one conditional UpdateItem.
    /// Failures are logged; returns how many were marked.
    async fn nudge_queue(
        &self,
        queue: &QueueName,
        endpoints: &[PushEntry],
        now: Timestamp,
        waited_since: Timestamp,
    ) -> usize {
        let pushed = |r: &ReadyJob| {
            endpoints
                .iter()
                .any(|e| e.disabled.is_none() && e.endpoint.takes(queue, &r.job.spec.job_type))
        };
        let waiting = match self.ready_jobs(queue, NUDGE_PER_QUEUE, waited_since).await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!(queue = %queue, error = %e, "waiting pushed jobs unreadable");
                return 0;
            }
        };
        let mut nudged = 0;
        for r in waiting.iter().filter(|r| pushed(r)) {
            match self.nudge(r, now).await {
                Ok(true) => nudged += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(queue = %queue, job_id = %r.job.id, error = %e, "pushed job not nudged");
                    break;
                }
            }
        }
        nudged
    }

    /// Marks `ready` as nudged, if it is still available at the same index entry.
    async fn nudge(&self, ready: &ReadyJob, now: Timestamp) -> Result<bool, StoreError> {
        let out = self
            .engine
            .table
            .update_item()
            .set_key(Some(item::job_key(&ready.job.id)))
            .update_expression("SET #nudged = :now")
            .condition_expression("#state = :available AND gsi1sk = :sk")
            .expression_attribute_names("#nudged", NUDGED)
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":now", item::n(now.timestamp_micros()))
            .expression_attribute_values(":available", s(JobState::Available.as_str()))
            .expression_attribute_values(":sk", s(ready.ready_sk.clone()))
            .send()
            .await;
        Ok(self
            .engine
            .table
            .tally_conditional(crate::usage::Kind::Write, out)?
            .is_some())
    }

    /// Job `id` if it is available (one strongly consistent GetItem): a planned push
    /// offer taken from the delivery queue.
    pub async fn ready_job(&self, id: &JobId) -> Result<Option<ReadyJob>, StoreError> {
        let Some(raw) = self.engine.table.read_item(item::job_key(id)).await? else {
            return Ok(None);
        };
        if item::state_of(&raw) != Some(JobState::Available) {
            return Ok(None);
        }
        let Some(ready_sk) = raw.get("gsi1sk").and_then(|v| v.as_s().ok()).cloned() else {
            return Ok(None);
        };
        Ok(item::job_from_item(&raw)
            .ok()
            .map(|job| ReadyJob { job, ready_sk }))
    }

    /// Up to `limit` jobs of `queue` still available that were made available before
    /// `before` (one Query of the ready index per shard, then one GetItem per entry old
    /// enough, judged by the enqueue time in its index key): the dispatcher's catch-up,
    /// for jobs the stream offered while the endpoints were full. Jobs of types no
    /// endpoint takes are read too (the index carries no type): a queue mixing pushed and
    /// polled types pays those reads when its polled jobs wait.
    pub async fn ready_jobs(
        &self,
        queue: &QueueName,
        limit: usize,
        before: Timestamp,
    ) -> Result<Vec<ReadyJob>, StoreError> {
        let cutoff = before.timestamp_micros();
        let mut out = Vec::new();
        let lanes = self.engine.lanes(std::slice::from_ref(queue)).await?;
        for (lane, shard) in lanes
            .iter()
            .flat_map(|lane| (0..self.engine.queue_shards()).map(move |shard| (lane, shard)))
        {
            let page = i32::try_from(limit.saturating_sub(out.len())).unwrap_or(25);
            if page == 0 {
                break;
            }
            for c in self.engine.ready_candidates(lane, shard, page).await? {
                let enqueued_us = c
                    .ready_sk
                    .split('#')
                    .nth(1)
                    .and_then(|us| us.parse::<i64>().ok());
                if enqueued_us.is_some_and(|us| us > cutoff) {
                    continue;
                }
                let Some(raw) = self.engine.table.read_item(item::job_key(&c.id)).await? else {
                    continue;
                };
                if item::state_of(&raw) != Some(JobState::Available) {
                    continue;
                }
                if let Ok(job) = item::job_from_item(&raw) {
                    out.push(ReadyJob {
                        job,
                        ready_sk: c.ready_sk.clone(),
                    });
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Change;
    use ojs_core::job::NewJob;

    fn available() -> Job {
        let new = NewJob::from_json(json!({"type": "t.x", "args": [], "options": {"queue": "q"}}));
        Job::enqueue(new.unwrap_or_else(|e| panic!("{e}")), time::now())
    }

    fn nudged(mut change: Change, at: Option<i64>, on_old: bool) -> Change {
        let target = if on_old {
            &mut change.old
        } else {
            &mut change.new
        };
        if let (Some(item), Some(at)) = (target.as_mut(), at) {
            item.insert(NUDGED.to_owned(), item::n(at));
        }
        change
    }

    #[test]
    fn a_job_made_available_is_ready_and_a_rewrite_is_not() {
        let job = available();
        assert!(Change::between(None, Some(&job)).ready_job().is_some());
        assert!(Change::between(Some(&job), Some(&job))
            .ready_job()
            .is_none());
        let mut active = job.clone();
        active.status.state = JobState::Active;
        assert!(Change::between(Some(&job), Some(&active))
            .ready_job()
            .is_none());
    }

    #[test]
    fn a_nudge_makes_a_waiting_job_ready_once() {
        let job = available();
        let same = || Change::between(Some(&job), Some(&job));
        let first = nudged(same(), Some(1), false);
        assert!(first.ready_job().is_some());
        let again = nudged(nudged(same(), Some(1), true), Some(2), false);
        assert!(again.ready_job().is_some());
        let after = nudged(nudged(same(), Some(1), true), Some(1), false);
        assert!(after.ready_job().is_none(), "a later write keeps the mark");
        let cleared = nudged(same(), Some(1), true);
        assert!(cleared.ready_job().is_none());
    }
}

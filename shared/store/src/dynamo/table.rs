//! The table: [`Table`] holds the client, the table's name and the capacity tally, and is
//! the only way the layers above reach DynamoDB (its request builders are in
//! `dynamo/request.rs`, whole-partition reads in `dynamo/partition.rs`, bulk reads in
//! `dynamo/batch_read.rs`). Here too: its lifecycle for local use and tests, built from
//! [`crate::schema`].

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
    Projection as DdbProjection, ProjectionType, ScalarAttributeType, StreamSpecification,
    StreamViewType, TimeToLiveSpecification,
};

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};

use crate::error::StoreError;
use crate::item::s;
use crate::item::Item;
use crate::schema::{IndexDef, KeyDef, Projection, INDEXES, PRIMARY, TTL_ATTRIBUTE};
use crate::usage::{Usage, UsageSnapshot};
use std::sync::Arc;

/// One DynamoDB table as the store uses it. Cheap to clone; clones share the tally.
#[derive(Clone)]
pub(crate) struct Table {
    pub(super) client: aws_sdk_dynamodb::Client,
    name: Arc<str>,
    pub(super) usage: Arc<Usage>,
}

/// The create request's definition of the index `ix`.
fn global_index(ix: &IndexDef) -> Result<GlobalSecondaryIndex, StoreError> {
    let projection = match ix.projection {
        Projection::KeysOnly => DdbProjection::builder().projection_type(ProjectionType::KeysOnly),
        Projection::Include(attrs) => attrs.iter().fold(
            DdbProjection::builder().projection_type(ProjectionType::Include),
            |p, a| p.non_key_attributes(*a),
        ),
    };
    GlobalSecondaryIndex::builder()
        .index_name(ix.name)
        .set_key_schema(Some(key_schema(&ix.keys)?))
        .projection(projection.build())
        .build()
        .map_err(|e| StoreError::Backend(e.to_string()))
}

fn key_schema(k: &KeyDef) -> Result<Vec<KeySchemaElement>, StoreError> {
    let build = |name: &str, kind| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))
    };
    Ok(vec![
        build(k.partition, KeyType::Hash)?,
        build(k.sort, KeyType::Range)?,
    ])
}

/// The change stream every table has: [`crate::schema::STREAM_VIEW`].
fn stream_specification() -> Result<StreamSpecification, StoreError> {
    StreamSpecification::builder()
        .stream_enabled(true)
        .stream_view_type(StreamViewType::from(crate::schema::STREAM_VIEW))
        .build()
        .map_err(|e| StoreError::Backend(e.to_string()))
}

impl Table {
    /// The table `name` reached through `client`, with a tally of its own.
    pub(crate) fn new(client: aws_sdk_dynamodb::Client, name: &str) -> Self {
        Self {
            client,
            name: Arc::from(name),
            usage: Arc::new(Usage::default()),
        }
    }

    /// The table's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The same table with a tally of its own (the in-process stream consumer, whose
    /// work the stream function pays for on AWS, not the requests).
    pub(crate) fn with_own_tally(&self) -> Self {
        Self {
            usage: Arc::new(Usage::default()),
            ..self.clone()
        }
    }

    /// The client itself, for a call that is no part of what the store costs (the local
    /// stream consumer's catch-up marks).
    pub(crate) fn untallied(&self) -> &aws_sdk_dynamodb::Client {
        &self.client
    }

    /// The transaction item writing `item`, on condition that no item has its key yet.
    pub(crate) fn put_new(&self, item: Item) -> Result<TransactWriteItem, StoreError> {
        let put = Put::builder()
            .table_name(self.name())
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// DynamoDB calls and capacity consumed through this table so far.
    pub(crate) fn usage(&self) -> UsageSnapshot {
        self.usage.snapshot()
    }

    /// Creates the table (with TTL and its change stream) unless it exists, and waits
    /// until it is active; a table made before the stream was part of the schema gets
    /// the stream. True when this call created the table.
    pub(crate) async fn ensure(&self) -> Result<bool, StoreError> {
        if let Ok(out) = self
            .client
            .describe_table()
            .table_name(self.name())
            .send()
            .await
        {
            let streaming = out
                .table()
                .and_then(|t| t.stream_specification())
                .is_some_and(|s| s.stream_enabled());
            if !streaming {
                self.client
                    .update_table()
                    .table_name(self.name())
                    .stream_specification(stream_specification()?)
                    .send()
                    .await
                    .map_err(StoreError::from_sdk)?;
            }
            return Ok(false);
        }
        self.create_table().await?;
        self.until_active().await;
        let ttl = TimeToLiveSpecification::builder()
            .attribute_name(TTL_ATTRIBUTE)
            .enabled(true)
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        self.client
            .update_time_to_live()
            .table_name(self.name())
            .time_to_live_specification(ttl)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(true)
    }

    /// Creates the table with its indexes and change stream; one another process
    /// created first will do.
    async fn create_table(&self) -> Result<(), StoreError> {
        let mut attributes: Vec<&str> = vec![PRIMARY.partition, PRIMARY.sort];
        for ix in INDEXES {
            attributes.extend([ix.keys.partition, ix.keys.sort]);
        }
        let mut req = self
            .client
            .create_table()
            .table_name(self.name())
            .billing_mode(BillingMode::PayPerRequest)
            .stream_specification(stream_specification()?)
            .set_key_schema(Some(key_schema(&PRIMARY)?));
        for a in attributes {
            let def = AttributeDefinition::builder()
                .attribute_name(a)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            req = req.attribute_definitions(def);
        }
        for ix in INDEXES {
            req = req.global_secondary_indexes(global_index(ix)?);
        }
        match req.send().await {
            Ok(_) => Ok(()),
            // Another process created it first.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_in_use_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(StoreError::from_sdk(e)),
        }
    }

    /// Waits (up to 30 s) until the table is active.
    async fn until_active(&self) {
        for _ in 0..120 {
            let out = self
                .client
                .describe_table()
                .table_name(self.name())
                .send()
                .await;
            let active = out
                .ok()
                .and_then(|o| o.table().and_then(|t| t.table_status().cloned()))
                .is_some_and(|s| s == aws_sdk_dynamodb::types::TableStatus::Active);
            if active {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }

    /// The ARN of the table's change stream.
    pub(crate) async fn stream_arn(&self) -> Result<String, StoreError> {
        let out = self
            .client
            .describe_table()
            .table_name(self.name())
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        out.table()
            .and_then(|t| t.latest_stream_arn())
            .map(str::to_owned)
            .ok_or_else(|| StoreError::Backend("the table has no change stream".into()))
    }

    /// Deletes the table (tests clean up after themselves).
    pub(crate) async fn delete(&self) -> Result<(), StoreError> {
        self.client
            .delete_table()
            .table_name(self.name())
            .send()
            .await
            .map(|_| ())
            .map_err(StoreError::from_sdk)
    }

    /// Checks that the table answers a read (one eventually consistent GetItem).
    pub(crate) async fn ping(&self) -> Result<(), StoreError> {
        self.client
            .get_item()
            .table_name(self.name())
            .key("pk", s("HEALTH"))
            .key("sk", s("HEALTH"))
            .send()
            .await
            .map(|_| ())
            .map_err(StoreError::from_sdk)
    }
}

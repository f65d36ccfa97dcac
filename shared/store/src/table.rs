//! Table lifecycle for local use and tests, built from [`crate::schema`].

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
    Projection as DdbProjection, ProjectionType, ScalarAttributeType, TimeToLiveSpecification,
};

use crate::error::StoreError;
use crate::item::s;
use crate::schema::{KeyDef, Projection, INDEXES, PRIMARY, TTL_ATTRIBUTE};
use crate::Store;

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

impl Store {
    /// Creates the table (and enables TTL) unless it exists; waits until it is active.
    pub async fn ensure_table(&self) -> Result<(), StoreError> {
        if self
            .client
            .describe_table()
            .table_name(self.table())
            .send()
            .await
            .is_ok()
        {
            return Ok(());
        }
        let mut attributes: Vec<&str> = vec![PRIMARY.partition, PRIMARY.sort];
        for ix in INDEXES {
            attributes.extend([ix.keys.partition, ix.keys.sort]);
        }
        let mut req = self
            .client
            .create_table()
            .table_name(self.table())
            .billing_mode(BillingMode::PayPerRequest)
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
            let projection = match ix.projection {
                Projection::KeysOnly => {
                    DdbProjection::builder().projection_type(ProjectionType::KeysOnly)
                }
                Projection::Include(attrs) => attrs.iter().fold(
                    DdbProjection::builder().projection_type(ProjectionType::Include),
                    |p, a| p.non_key_attributes(*a),
                ),
            };
            let gsi = GlobalSecondaryIndex::builder()
                .index_name(ix.name)
                .set_key_schema(Some(key_schema(&ix.keys)?))
                .projection(projection.build())
                .build()
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            req = req.global_secondary_indexes(gsi);
        }
        match req.send().await {
            Ok(_) => {}
            // Another process created it first.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_in_use_exception()) => {}
            Err(e) => return Err(StoreError::from_sdk(e)),
        }
        for _ in 0..120 {
            let out = self
                .client
                .describe_table()
                .table_name(self.table())
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
        let ttl = TimeToLiveSpecification::builder()
            .attribute_name(TTL_ATTRIBUTE)
            .enabled(true)
            .build()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        self.client
            .update_time_to_live()
            .table_name(self.table())
            .time_to_live_specification(ttl)
            .send()
            .await
            .map_err(StoreError::from_sdk)?;
        Ok(())
    }

    /// Deletes the table (tests clean up after themselves).
    pub async fn delete_table(&self) -> Result<(), StoreError> {
        self.client
            .delete_table()
            .table_name(self.table())
            .send()
            .await
            .map(|_| ())
            .map_err(StoreError::from_sdk)
    }

    /// Checks that the table answers a read (one eventually consistent GetItem).
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.client
            .get_item()
            .table_name(self.table())
            .key("pk", s("HEALTH"))
            .key("sk", s("HEALTH"))
            .send()
            .await
            .map(|_| ())
            .map_err(StoreError::from_sdk)
    }
}

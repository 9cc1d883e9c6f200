//! [`ShardRepartitionRule`]: the physical optimizer rule that puts a
//! [`ShardRepartitionExec`] where a `RepartitionExec` stands, and
//! [`with_shard_repartition`], which adds the rule to a `SessionStateBuilder` in one line.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::Boundedness;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};

use crate::exec::ShardRepartitionExec;
use crate::options::ShardRepartitionOptions;

/// Replaces each `RepartitionExec` that hashes or round-robins, does not preserve order, reads
/// a bounded input and has at least [`min_output_partitions`] outputs with a
/// [`ShardRepartitionExec`]. It runs last, after the rules that place repartitions.
///
/// [`min_output_partitions`]: ShardRepartitionOptions::min_output_partitions
#[derive(Debug, Clone, Default)]
pub struct ShardRepartitionRule {
    options: ShardRepartitionOptions,
}

impl ShardRepartitionRule {
    /// The rule with `options`.
    pub fn new(options: ShardRepartitionOptions) -> Self {
        Self { options }
    }

    fn replaces(&self, repartition: &RepartitionExec) -> bool {
        let partitioning = repartition.partitioning();
        matches!(
            partitioning,
            Partitioning::Hash(..) | Partitioning::RoundRobinBatch(_)
        ) && !repartition.preserve_order()
            && partitioning.partition_count() >= self.options.min_output_partitions
            && matches!(repartition.input().boundedness(), Boundedness::Bounded)
    }
}

impl PhysicalOptimizerRule for ShardRepartitionRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(repartition) = node.downcast_ref::<RepartitionExec>() else {
                return Ok(Transformed::no(node));
            };
            if !self.replaces(repartition) {
                return Ok(Transformed::no(node));
            }
            let exec = ShardRepartitionExec::from_repartition(repartition, self.options.clone())?;
            Ok(Transformed::yes(Arc::new(exec) as Arc<dyn ExecutionPlan>))
        })
        .map(|transformed| transformed.data)
    }

    fn name(&self) -> &str {
        "ShardRepartitionRule"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Adds [`ShardRepartitionRule`] with `options` to a session, after its other physical
/// optimizer rules.
///
/// ```
/// use arrow_shards_datafusion::{ShardRepartitionOptions, with_shard_repartition};
/// use datafusion::execution::session_state::SessionStateBuilder;
/// use datafusion::prelude::SessionContext;
///
/// let state = with_shard_repartition(
///     SessionStateBuilder::new().with_default_features(),
///     ShardRepartitionOptions::default(),
/// )
/// .build();
/// let ctx = SessionContext::new_with_state(state);
/// # let _ = ctx;
/// ```
pub fn with_shard_repartition(
    builder: SessionStateBuilder,
    options: ShardRepartitionOptions,
) -> SessionStateBuilder {
    builder.with_physical_optimizer_rule(Arc::new(ShardRepartitionRule::new(options)))
}

//! TPC-H tables from `tpchgen-arrow`, in memory, each split in `parts` pieces (the scans'
//! partitions); shared by the tests and the example.

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::error::ArrowError;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

/// A table's name and its pieces.
pub type Table = (&'static str, Vec<Vec<RecordBatch>>);

/// The eight TPC-H tables at scale factor `sf`.
pub fn tables(sf: f64, parts: i32) -> Vec<Table> {
    let split = |f: &dyn Fn(i32) -> Vec<RecordBatch>| (1..=parts).map(f).collect::<Vec<_>>();
    vec![
        (
            "lineitem",
            split(&|p| all(LineItemArrow::new(LineItemGenerator::new(sf, p, parts)))),
        ),
        (
            "orders",
            split(&|p| all(OrderArrow::new(OrderGenerator::new(sf, p, parts)))),
        ),
        (
            "customer",
            split(&|p| all(CustomerArrow::new(CustomerGenerator::new(sf, p, parts)))),
        ),
        (
            "supplier",
            split(&|p| all(SupplierArrow::new(SupplierGenerator::new(sf, p, parts)))),
        ),
        (
            "part",
            split(&|p| all(PartArrow::new(PartGenerator::new(sf, p, parts)))),
        ),
        (
            "partsupp",
            split(&|p| all(PartSuppArrow::new(PartSuppGenerator::new(sf, p, parts)))),
        ),
        (
            "nation",
            vec![all(NationArrow::new(NationGenerator::new(sf, 1, 1)))],
        ),
        (
            "region",
            vec![all(RegionArrow::new(RegionGenerator::new(sf, 1, 1)))],
        ),
    ]
}

fn all(batches: impl Iterator<Item = Result<RecordBatch, ArrowError>>) -> Vec<RecordBatch> {
    batches
        .collect::<Result<_, _>>()
        .expect("tpchgen-arrow batches")
}

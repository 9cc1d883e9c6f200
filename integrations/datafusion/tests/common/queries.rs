//! TPC-H queries 1, 3, 5, 9 and 18, shared by the tests and the example.

/// The TPC-H queries the tests run (the specification's text with its default substitution
/// parameters).
pub const QUERIES: [(u32, &str); 5] = [
    (
        1,
        "select l_returnflag, l_linestatus, sum(l_quantity) as sum_qty,
        sum(l_extendedprice) as sum_base_price,
        sum(l_extendedprice * (1 - l_discount)) as sum_disc_price,
        sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge,
        avg(l_quantity) as avg_qty, avg(l_extendedprice) as avg_price,
        avg(l_discount) as avg_disc, count(*) as count_order
      from lineitem
      where l_shipdate <= date '1998-12-01' - interval '90' day
      group by l_returnflag, l_linestatus
      order by l_returnflag, l_linestatus",
    ),
    (
        3,
        "select l_orderkey, sum(l_extendedprice * (1 - l_discount)) as revenue,
        o_orderdate, o_shippriority
      from customer, orders, lineitem
      where c_mktsegment = 'BUILDING' and c_custkey = o_custkey and l_orderkey = o_orderkey
        and o_orderdate < date '1995-03-15' and l_shipdate > date '1995-03-15'
      group by l_orderkey, o_orderdate, o_shippriority
      order by revenue desc, o_orderdate, l_orderkey
      limit 10",
    ),
    (
        5,
        "select n_name, sum(l_extendedprice * (1 - l_discount)) as revenue
      from customer, orders, lineitem, supplier, nation, region
      where c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey
        and c_nationkey = s_nationkey and s_nationkey = n_nationkey
        and n_regionkey = r_regionkey and r_name = 'ASIA'
        and o_orderdate >= date '1994-01-01'
        and o_orderdate < date '1994-01-01' + interval '1' year
      group by n_name
      order by revenue desc",
    ),
    (
        9,
        "select nation, o_year, sum(amount) as sum_profit
      from (
        select n_name as nation, extract(year from o_orderdate) as o_year,
          l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity as amount
        from part, supplier, lineitem, partsupp, orders, nation
        where s_suppkey = l_suppkey and ps_suppkey = l_suppkey and ps_partkey = l_partkey
          and p_partkey = l_partkey and o_orderkey = l_orderkey and s_nationkey = n_nationkey
          and p_name like '%green%'
      ) as profit
      group by nation, o_year
      order by nation, o_year desc",
    ),
    (
        18,
        "select c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice, sum(l_quantity)
      from customer, orders, lineitem
      where o_orderkey in (
          select l_orderkey from lineitem group by l_orderkey having sum(l_quantity) > 300)
        and c_custkey = o_custkey and o_orderkey = l_orderkey
      group by c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice
      order by o_totalprice desc, o_orderdate, o_orderkey
      limit 100",
    ),
];

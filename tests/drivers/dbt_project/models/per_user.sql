{{ config(materialized='materialized_view') }}
select user_id, count(*) as requests, sum(latency_ms) as total_ms from {{ source('raw', 'requests') }} group by user_id

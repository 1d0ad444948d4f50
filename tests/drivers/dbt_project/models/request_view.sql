{{ config(materialized='view') }}
select id, user_id, latency_ms from {{ source('raw', 'requests') }} where latency_ms is not null

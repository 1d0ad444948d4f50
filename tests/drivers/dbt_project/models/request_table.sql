{{ config(materialized='table') }}
select id, user_id, latency_ms * 2 as doubled from {{ ref('request_view') }}

-- Apply one slot if the stored (episode, slot) is the expected one (EpisodeStore.compare_and_set).
-- KEYS[1]: the campaign's hash {e: episode, s: slot, b: blob, w: the last write's token}
-- ARGV: episode, expected_slot, blob, ttl_ms, channel, campaign, expected_sha1 ('' for no check: else the stored
-- blob must be the one the new state was computed from, so a re-registration A -> B -> A in between is a change),
-- token (random per call: the client library re-sends a call whose reply was lost with the same ARGV, and the
-- re-send must answer as the first send did, not as a stale write), summary (the end of the notice: '\31' ratio
-- '\31' budget flag, or ''), publish command (PUBLISH on one server, SPUBLISH on a Redis Cluster, where the channel
-- is in the key's own slot)
-- Returns {1} when applied (slot becomes expected_slot + 1), or applied by this very call (its token, that slot and
-- its blob are stored: a process on an older script writes no token); {-1} when the campaign
-- has no state; {0, e, s, b} (the stored state, untouched) otherwise.
local current = redis.call('HMGET', KEYS[1], 'e', 's', 'b', 'w')
if not current[1] then
  return {-1}
end
local expected = tonumber(ARGV[2])
if current[1] ~= ARGV[1] or tonumber(current[2]) ~= expected then
  if current[4] == ARGV[8] and current[1] == ARGV[1] and tonumber(current[2]) == expected + 1 and current[3] == ARGV[3] then
    return {1}
  end
  return {0, current[1], current[2], current[3]}
end
if ARGV[7] ~= '' and redis.sha1hex(current[3]) ~= ARGV[7] then
  return {0, current[1], current[2], current[3]}
end
redis.call('HSET', KEYS[1], 's', tostring(expected + 1), 'b', ARGV[3], 'w', ARGV[8])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
-- The notice names the state written (campaign, episode, slot) and what it bids, so that a subscriber updates its
-- cache from the notice alone and tells its own write's echo. pcall: a notice that cannot go out never fails the
-- write, which stands; subscribers then learn of it by reading (their staleness bound).
redis.pcall(ARGV[10], ARGV[5], ARGV[6] .. '\31' .. ARGV[1] .. '\31' .. tostring(expected + 1) .. ARGV[9])
return {1}

-- Start an episode unless it is the stored one (EpisodeStore.register).
-- KEYS[1]: the campaign's hash {e: episode, s: slot, b: blob, w: the last write's token}
-- ARGV: episode, blob, ttl_ms, channel, campaign, token (random per call: the client library re-sends a call whose
-- reply was lost with the same ARGV, and the re-send must answer as the first send did, not as a repeat),
-- summary (the end of the notice: '\31' ratio '\31' budget flag, or ''), publish command (PUBLISH on one server,
-- SPUBLISH on a Redis Cluster, where the channel is in the key's own slot)
-- Returns {1} when written (or written by this very call: its token, slot 0 and its blob are stored);
-- {0, e, s, b} (the stored state, untouched) when the episode is already stored.
local current = redis.call('HMGET', KEYS[1], 'e', 's', 'b', 'w')
if current[1] == ARGV[1] then
  if current[4] == ARGV[6] and current[2] == '0' and current[3] == ARGV[2] then
    return {1}
  end
  return {0, current[1], current[2], current[3]}
end
redis.call('HSET', KEYS[1], 'e', ARGV[1], 's', '0', 'b', ARGV[2], 'w', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
-- The notice names the state written (campaign, episode, slot) and what it bids, so that a subscriber updates its
-- cache from the notice alone and tells its own write's echo. pcall: a notice that cannot go out (a server without
-- SPUBLISH) never fails the write, which stands; subscribers then learn of it by reading (their staleness bound).
redis.pcall(ARGV[8], ARGV[4], ARGV[5] .. '\31' .. ARGV[1] .. '\31' .. '0' .. ARGV[7])
return {1}

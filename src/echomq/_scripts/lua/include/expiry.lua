-- Job expiry (docs/runtime.md "Expiry"): a job may carry a deadline, its row's
-- `expires_at` (server ms). A job not started by then is never run: the claim drops it
-- into the terminal state `expired` (claim.lua). The queue's meta field `expiring` is set
-- by the first enqueue of a job with a deadline, so a claim on a queue that never had one
-- reads no deadline at all.
--   expiry_at(field, now)  -- the deadline an enqueue option field names: '' none (nil);
--                             '@<ms>' that server ms; '<ms>' that many ms after now
local function expiry_at(field, now)
  if field == '' then return nil end
  if string.byte(field, 1) == 64 then return tonumber(string.sub(field, 2)) end  -- '@'
  return now + tonumber(field)
end

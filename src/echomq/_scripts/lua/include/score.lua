-- band_score(priority, seq): a pending score. Higher priority first (-4095..4095), FIFO
-- within a priority by seq; a job handed back without its fault takes seq 0 (the front of
-- its band). |priority| * 2^40 + seq stays below 2^53: an exact double.
local BAND = 1099511627776  -- 2^40
local function band_score(priority, seq)
  return -tonumber(priority) * BAND + seq
end
-- int_arg(x): a whole number as a command argument, spelled as redis.call would spell the
-- Lua number ("%.17g": the same digits for an integer below 2^53), made once: redis.call
-- formats every number argument on every call and passes a string as it is. A number
-- that is not whole stays a number.
local function int_arg(x)
  if x % 1 ~= 0 then return x end
  return string.format('%d', x)
end

-- band_score(priority, seq): a pending score. Higher priority first (-4095..4095), FIFO
-- within a priority by seq; a job handed back without its fault takes seq 0 (the front of
-- its band). |priority| * 2^40 + seq stays below 2^53: an exact double.
local BAND = 1099511627776  -- 2^40
local function band_score(priority, seq)
  return -tonumber(priority) * BAND + seq
end

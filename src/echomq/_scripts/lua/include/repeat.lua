-- REPEAT_FORMAT: the layout version of a repeat record (emq:{q}:repeat:<key>, its field
-- `v`). A script refuses a record of another version (EMQFORMAT) rather than misread it;
-- Python reads the number from here (scripts.REPEAT_FORMAT).
local REPEAT_FORMAT = 1

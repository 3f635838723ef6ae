-- Health of a Clusternet Subscription, from the conditions its aggregator writes (kstatus's
-- Ready, Reconciling and Stalled; clusternet-rs docs/spec/deployer.md section 17): Healthy when
-- every bound cluster runs it healthy, Degraded when it cannot get there without a hand (a child's
-- object failed, a rollout rolled back, a feed missing), Suspended while a user holds its rollout,
-- Progressing otherwise. Uses only Lua's base and table libraries (Argo CD's sandbox).
local hs = { status = "Progressing", message = "Waiting for the Subscription's status" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.message = "Waiting for the status of generation " .. generation
  return hs
end
local ready = nil
local reconciling = nil
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Stalled" and c.status == "True" then
    hs.status = "Degraded"
    hs.message = c.message
    return hs
  end
  if c.type == "Reconciling" and c.status == "True" then
    reconciling = c
  end
  if c.type == "Ready" then
    ready = c
  end
end
if reconciling ~= nil then
  if reconciling.reason == "PausedByUser" then
    hs.status = "Suspended"
  end
  hs.message = reconciling.message
  return hs
end
if ready ~= nil then
  if ready.status == "True" then
    hs.status = "Healthy"
  end
  hs.message = ready.message
end
return hs

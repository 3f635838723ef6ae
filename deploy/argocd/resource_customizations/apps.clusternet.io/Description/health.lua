-- Health of a Clusternet Description (what one cluster receives of a Subscription): Degraded when
-- deploying it failed or an object in the child is failed (kstatus health, manifestStatuses[].health),
-- Healthy once it is deployed at its generation and every object is Current, Progressing otherwise.
-- Uses only Lua's base and table libraries (Argo CD's sandbox).
local hs = { status = "Progressing", message = "Waiting to be deployed" }
if obj.status == nil then
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.message = "Waiting for the status of generation " .. generation
  return hs
end
if obj.status.phase == "Failure" then
  hs.status = "Degraded"
  hs.message = obj.status.reason
  return hs
end
local pending = nil
if obj.status.manifestStatuses ~= nil then
  for _, m in ipairs(obj.status.manifestStatuses) do
    if m.health ~= nil then
      local name = m.kind .. " " .. m.name
      if m.namespace ~= nil and m.namespace ~= "" then
        name = m.kind .. " " .. m.namespace .. "/" .. m.name
      end
      if m.health.status == "Failed" then
        hs.status = "Degraded"
        hs.message = name .. ": " .. m.health.message
        return hs
      end
      if m.health.status ~= "Current" and pending == nil then
        pending = name .. ": " .. m.health.message
      end
    end
  end
end
if obj.status.phase ~= "Success" then
  hs.message = "Phase " .. (obj.status.phase or "Pending")
  return hs
end
if pending ~= nil then
  hs.message = pending
  return hs
end
hs.status = "Healthy"
hs.message = "Deployed; every object is healthy"
return hs
